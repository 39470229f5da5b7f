package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The identity and date of every commit the harness makes.
const (
	// AuthorName is the author and committer name.
	AuthorName = "Alice"
	// AuthorEmail is the author and committer email.
	AuthorEmail = "alice@example.com"
	// Date is the author and committer date.
	Date = "2026-01-01T00:00:00Z"
)

// Env returns the environment every harness git command runs with: the
// process environment plus isolated git configuration and the fixed identity.
// Tests that run git themselves (or code that shells out to git) can use it.
func Env() []string {
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME="+AuthorName,
		"GIT_AUTHOR_EMAIL="+AuthorEmail,
		"GIT_COMMITTER_NAME="+AuthorName,
		"GIT_COMMITTER_EMAIL="+AuthorEmail,
		"GIT_AUTHOR_DATE="+Date,
		"GIT_COMMITTER_DATE="+Date,
		"GIT_TERMINAL_PROMPT=0",
	)
}

// Git runs git with args in dir (any directory when dir is "") and returns
// its trimmed standard output; a failure ends the test.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := run(dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func run(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = Env()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return strings.TrimSpace(stdout.String() + "\n" + stderr.String()), err
	}
	return strings.TrimSpace(stdout.String()), nil
}

// URL returns the file:// URL of the repository at dir.
func URL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return "file://" + filepath.ToSlash(abs)
}

// NewRemote creates a bare repository in t.TempDir() with one commit holding
// files (path -> content) on branch main, HEAD pointing at main, and returns
// its file:// URL.
func NewRemote(t testing.TB, files map[string]string) string {
	t.Helper()
	base := t.TempDir()
	bare := filepath.Join(base, "remote.git")
	work := filepath.Join(base, "seed")
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	Git(t, "", "init", "--quiet", "--initial-branch=main", work)
	writeFiles(t, work, files, nil)
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "--quiet", "--allow-empty", "-m", "Initial commit")
	Git(t, work, "push", "--quiet", bare, "main:main")
	return URL(bare)
}

// Push clones url into a temporary directory, writes files (path -> content;
// "" is an empty file), removes the paths in deletes, commits everything as
// "Alice <alice@example.com>" with message msg and pushes to main. A push
// rejected because main moved is retried after `git pull --rebase`, up to
// five times. It returns the hash of the pushed commit.
func Push(t testing.TB, url string, files map[string]string, deletes []string, msg string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	Git(t, "", "clone", "--quiet", "--branch", "main", url, work)
	writeFiles(t, work, files, deletes)
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "--quiet", "--allow-empty", "-m", msg)
	var lastErr string
	// like a person racing other pushers (and the hub's status commits):
	// rebase and push again, with a little jittered pause
	for i := range 30 {
		out, err := run(work, "push", "--quiet", "origin", "HEAD:main")
		if err == nil {
			return Git(t, work, "rev-parse", "HEAD")
		}
		lastErr = out
		time.Sleep(time.Duration(i*7%50) * time.Millisecond)
		Git(t, work, "pull", "--quiet", "--rebase", "origin", "main")
	}
	t.Fatalf("git push to %s kept failing: %s", url, lastErr)
	return ""
}

// ReadFile returns the content of path at the tip of main of url and whether
// the file exists there.
func ReadFile(t testing.TB, url, path string) (string, bool) {
	t.Helper()
	return ReadFileAt(t, url, "main", path)
}

// ReadFileAt returns the content of path at the tip of branch of url and
// whether the file (and the branch) exists. A file:// remote is read in
// place; another is fetched first.
func ReadFileAt(t testing.TB, url, branch, path string) (string, bool) {
	t.Helper()
	var cmd *exec.Cmd
	if dir, ok := strings.CutPrefix(url, "file://"); ok {
		cmd = exec.Command("git", "--git-dir", dir, "cat-file", "blob", "refs/heads/"+branch+":"+path)
	} else {
		dir := fetchBranch(t, url, branch)
		if dir == "" {
			return "", false
		}
		cmd = exec.Command("git", "cat-file", "blob", "FETCH_HEAD:"+path)
		cmd.Dir = dir
	}
	cmd.Env = Env()
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	return string(out), true
}

// Log returns the subjects of main's first-parent history at url, newest
// first.
func Log(t testing.TB, url string) []string {
	t.Helper()
	dir := fetchTo(t, url)
	out := Git(t, dir, "log", "--first-parent", "--format=%s", "FETCH_HEAD")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Head returns the hash of main's tip at url.
func Head(t testing.TB, url string) string {
	t.Helper()
	out := Git(t, "", "ls-remote", url, "refs/heads/main")
	hash, _, ok := strings.Cut(out, "\t")
	if !ok || hash == "" {
		t.Fatalf("no refs/heads/main at %s", url)
	}
	return hash
}

// fetchTo fetches main of url into a fresh bare repository and returns its
// directory; FETCH_HEAD names the fetched tip.
func fetchTo(t testing.TB, url string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "read.git")
	Git(t, "", "init", "--quiet", "--bare", dir)
	Git(t, dir, "fetch", "--quiet", "--no-tags", url, "refs/heads/main")
	return dir
}

// fetchBranch is fetchTo for branch; "" when the branch does not exist.
func fetchBranch(t testing.TB, url, branch string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "read.git")
	Git(t, "", "init", "--quiet", "--bare", dir)
	if _, err := run(dir, "fetch", "--quiet", "--no-tags", url, "refs/heads/"+branch); err != nil {
		return ""
	}
	return dir
}

func writeFiles(t testing.TB, dir string, files map[string]string, deletes []string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range deletes {
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			t.Fatal(err)
		}
	}
}

// PushOptions is a push made with its own git configuration (e.g. commit
// signing: gpg.format, user.signingkey, commit.gpgsign), author and
// environment (e.g. GNUPGHOME).
type PushOptions struct {
	Files       map[string]string
	Deletes     []string
	Message     string
	Config      map[string]string // git -c key=value for every command
	AuthorName  string            // "" = AuthorName
	AuthorEmail string            // "" = AuthorEmail
	Env         []string
}

// PushWith is Push with opts: the commit (and any rebase of it while racing
// other pushers) is made with opts' configuration and author, so a signing
// configuration signs every commit that lands.
func PushWith(t testing.TB, url string, opts PushOptions) string {
	t.Helper()
	var cfg []string
	for k, v := range opts.Config {
		cfg = append(cfg, "-c", k+"="+v)
	}
	env := Env()
	if opts.AuthorName != "" {
		env = append(env, "GIT_AUTHOR_NAME="+opts.AuthorName, "GIT_COMMITTER_NAME="+opts.AuthorName)
	}
	if opts.AuthorEmail != "" {
		env = append(env, "GIT_AUTHOR_EMAIL="+opts.AuthorEmail, "GIT_COMMITTER_EMAIL="+opts.AuthorEmail)
	}
	env = append(env, opts.Env...)
	git := func(dir string, args ...string) (string, error) {
		cmd := exec.Command("git", append(cfg, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return strings.TrimSpace(out.String()), err
	}
	must := func(dir string, args ...string) string {
		t.Helper()
		out, err := git(dir, args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	work := filepath.Join(t.TempDir(), "work")
	must("", "clone", "--quiet", "--branch", "main", url, work)
	writeFiles(t, work, opts.Files, opts.Deletes)
	must(work, "add", "-A")
	must(work, "commit", "--quiet", "--allow-empty", "-m", opts.Message)
	var lastErr string
	for i := range 30 {
		out, err := git(work, "push", "--quiet", "origin", "HEAD:main")
		if err == nil {
			return must(work, "rev-parse", "HEAD")
		}
		lastErr = out
		time.Sleep(time.Duration(i*7%50) * time.Millisecond)
		must(work, "pull", "--quiet", "--rebase", "origin", "main")
	}
	t.Fatalf("git push to %s kept failing: %s", url, lastErr)
	return ""
}
