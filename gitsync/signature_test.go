package gitsync

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func pgpEntity(t *testing.T, name, email string) (*openpgp.Entity, string) {
	t.Helper()
	ent, err := openpgp.NewEntity(name, "", email, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ent.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return ent, buf.String()
}

// pushPGPSigned commits a file in a clone of url with go-git, signed by ent
// (nil = unsigned), pushes it with the git CLI and returns its hash.
func pushPGPSigned(t *testing.T, url string, ent *openpgp.Entity, file string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "w")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	if err := os.WriteFile(filepath.Join(work, file), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := git.PlainOpen(work)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(file); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "Signer", Email: "signer@example.com", When: time.Now()}
	h, err := wt.Commit("Signed change", &git.CommitOptions{Author: sig, Committer: sig, SignKey: ent})
	if err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	return h.String()
}

func TestVerifyCommitOpenPGP(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	unsigned := fetch(t, r)
	signer, signerPub := pgpEntity(t, "Signer", "signer@example.com")
	_, otherPub := pgpEntity(t, "Other", "other@example.com")
	signed := pushPGPSigned(t, url, signer, "b.json")
	fetch(t, r)
	ctx := context.Background()

	keys := SignerKeys{"signer@example.com": signerPub, "other@example.com": otherPub}
	if err := keys.Check(); err != nil {
		t.Fatal(err)
	}
	got, err := r.VerifyCommit(ctx, signed, keys)
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != "signer@example.com" || got.Format != FormatOpenPGP || len(got.Fingerprint) != 40 {
		t.Fatalf("signer = %+v", got)
	}

	t.Run("an unknown signer is refused", func(t *testing.T) {
		_, err := r.VerifyCommit(ctx, signed, SignerKeys{"other@example.com": otherPub})
		var ue *UnknownSignerError
		if !errors.As(err, &ue) || ue.Format != FormatOpenPGP || ue.KeyID == "" {
			t.Fatalf("error = %v, want *UnknownSignerError with the key id", err)
		}
	})
	t.Run("an unsigned commit is refused", func(t *testing.T) {
		if _, err := r.VerifyCommit(ctx, unsigned, keys); !errors.Is(err, ErrUnsigned) {
			t.Fatalf("error = %v, want ErrUnsigned", err)
		}
	})
	t.Run("a tampered commit is refused", func(t *testing.T) {
		r.mu.Lock()
		c, err := r.commitObject(signed)
		r.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		c.Message = "Signed change, then edited"
		var ue *UnknownSignerError
		if _, err := verifyCommit(c, keys); !errors.As(err, &ue) {
			t.Fatalf("error = %v, want *UnknownSignerError", err)
		}
	})
	t.Run("bad configured keys are reported", func(t *testing.T) {
		bad := SignerKeys{"x": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnope\n-----END PGP PUBLIC KEY BLOCK-----", "y": "ssh-ed25519 notbase64"}
		if err := bad.Check(); err == nil {
			t.Fatal("Check accepted garbage keys")
		}
	})
}

func TestVerifyCommitSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen (OpenSSH) is needed to make SSH-signed commits: apt-get install openssh-client")
	}
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	dir := t.TempDir()
	pubLine := func(seed byte) (string, string) {
		priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
		blk, err := ssh.MarshalPrivateKey(priv, "test")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "key"+string('a'+seed))
		if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
		pub, err := ssh.NewPublicKey(priv.Public())
		if err != nil {
			t.Fatal(err)
		}
		return path, string(ssh.MarshalAuthorizedKey(pub))
	}
	keyPath, pub := pubLine(1)
	_, otherPub := pubLine(2)

	work := filepath.Join(t.TempDir(), "w")
	gittest.Git(t, "", "clone", "--quiet", url, work)
	if err := os.WriteFile(filepath.Join(work, "b.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "-c", "gpg.format=ssh", "-c", "user.signingkey="+keyPath, "commit", "--quiet", "-S", "-m", "SSH-signed change")
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	signed := fetch(t, r)
	ctx := context.Background()

	got, err := r.VerifyCommit(ctx, signed, SignerKeys{"ops@example.com": pub, "other@example.com": otherPub})
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != "ops@example.com" || got.Format != FormatSSH || got.Fingerprint == "" {
		t.Fatalf("signer = %+v", got)
	}
	var ue *UnknownSignerError
	if _, err := r.VerifyCommit(ctx, signed, SignerKeys{"other@example.com": otherPub}); !errors.As(err, &ue) || ue.KeyID != got.Fingerprint {
		t.Fatalf("unknown SSH signer: error = %v", err)
	}
	r.mu.Lock()
	c, err := r.commitObject(signed)
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	c.Message += "tampered\n"
	if _, err := verifyCommit(c, SignerKeys{"ops@example.com": pub}); !errors.As(err, &ue) {
		t.Fatalf("tampered SSH-signed commit: error = %v", err)
	}
}
