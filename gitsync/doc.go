// Package gitsync follows the tracked branch of the config repository, is
// the only writer of status commits, and commits the files the hub writes
// on behalf of API callers.
//
// # Mirror
//
// The remote (a file:// URL or a local path of a bare or non-bare repository,
// both treated as a remote) is mirrored into a bare repository in a
// directory the hub owns: cloned once with a single branch and no tags, then
// updated by Fetch with a forced refspec into refs/remotes/origin/<branch>,
// so force-pushes are followed. Nothing is ever checked out: files are read
// from the object store at a commit, and changed paths come from comparing
// tree hashes, which skips identical subtrees and never reads file contents.
// go-git's file transport runs the git CLI's upload-pack and receive-pack,
// so git must be installed for local remotes. A push of a few files to a
// local remote is fetched without upload-pack: its objects, left loose in
// the remote, are read from there, each checked against its name (see
// localfetch.go); anything else goes through the transport.
//
// A *git.Repository is not goroutine-safe even for reads, so every method of
// Repo takes one mutex; the hub calls them from its loops without further
// locking. The long work is done outside it: a status commit builds and
// compresses its objects without it, a compaction merges packs without
// it, and a sync's fetch through the transport is staged (stagedfetch.go):
// go-git fetches into a storage of its own and the mutex is taken to put
// the pack in place. FetchStatus fetches the status branch alone that way,
// for a follower catching up with the status history beside its syncs.
//
// # Hostile trees
//
// The repository is written by many people. Files refuses symbolic links,
// submodules, files over the size limit and entry names that could leave
// the repository, reporting each as a fleetwave.FileError so the hub rejects
// the commit with a clear message instead of failing the sync. Paths passed
// in by callers must be clean and relative: under status/ for CommitStatus,
// outside it for CommitFiles.
//
// # Reading a commit
//
// A sync of a new commit reads its trees several times (StatusOnly, Files,
// Generations) and its blobs once. Decoded trees of the mirror are cached
// by hash, and Files keeps the contents of the blobs it returned by object
// id: the next Files reads only the blobs the previous one did not return,
// so a commit that changes one file of thousands costs one blob read and
// a walk of the trees. Both caches are correct for any commit because a
// hash names one content; each is bounded (the blobs by the last tree).
//
// # Generations
//
// gitsync does not know the schema: a Normalizer injected by the hub says
// which paths hold which object and what an object's canonical bytes are.
// An object's generation is a pure function of first-parent history: walking
// from the root commit, it grows by one each time the hash of the object's
// normalized content changes (appearing counts; a deleted object keeps its
// generation and continues from it if it reappears). Because the diff skips
// the top-level status/ tree by hash, the hub's own commits cost one tree
// comparison each. States are cached per commit (a few recent ones), so a
// new commit on top costs only its own diff (the newest state is taken
// over rather than copied, and only the objects the diff touches are
// compared with the marks); after a restart the history is replayed once.
//
// Generations never decrease. The highest generation returned per object and
// the commit it was returned at are kept as high-water marks, in memory and
// in a small JSON file in the mirror directory. When the branch is rewritten
// (the new tip does not descend from the marks' commit), generations are
// recomputed from the new history and lifted to the marks: an object whose
// content is the one it had at its mark keeps the mark; any other content
// gets the mark plus one, so the reconciler sees a new generation.
//
// # Status commits
//
// CommitStatus builds the commit with plumbing on top of the freshly fetched
// remote tip (rewriting only the trees along the edited paths), and pushes
// the raw commit hash with a lease on that tip. If anyone pushed in between,
// the push is refused; gitsync fetches again, rebuilds on the new tip and
// retries with exponential backoff, up to a limit. It never force-pushes,
// so a person's commit is never lost. A commit whose tree equals the tip's
// is not made at all, so status churn produces no commits.
//
// The commit's objects are built in memory and encoded once as a pack of
// whole objects (no delta search; zlib at its fastest level, compressed on
// GOMAXPROCS goroutines), written with its index into the mirror (synced
// before it is renamed into place) and sent to the remote byte for byte: the
// push talks to receive-pack through go-git's transport directly instead of
// go-git's Push, which would walk both trees to find the objects to send and
// read, delta-search and recompress each one again. The update names the
// lease as the ref's old value, so the remote itself refuses it when the
// branch moved after it advertised its refs. Every status commit sets back what someone else changed under
// status/ since the hub's previous status commit, and reports those paths
// (WriteStatus, and a warning per path): the hub is the only writer there.
// A remote that is down fails the call without changing anything; the
// caller keeps its batch and calls again.
//
// # Status branch
//
// WithStatusBranch sends status commits to another branch of the remote,
// and the tracked branch is then never written. The first status commit
// creates the branch as an orphan commit (no parent) whose tree holds only
// status/, seeded from status/ at the tracked tip so a repository switched
// over keeps its status; later commits build on the status branch's own
// tip. History is unrelated to the tracked branch on purpose: the branch
// reads as a log of status changes alone. Every fetch takes both branches
// in one round trip (two while the status branch does not exist yet); the
// push carries a lease on the status branch's tip (or creates the branch
// only if still absent), and races are retried as above. Human edits under
// status/ on the status branch are set back the same way. Fetch reports
// changes of the tracked branch only; StatusTip names the commit holding
// the latest status, and LatestTrailer searches the status branch first.
//
// Objects written by CommitStatus and fetched packs accumulate in the
// mirror, one pack per fetch or status commit. go-git searches every pack's
// index for each object it reads, and reloads them all after a big status
// commit, so the number of packs matters more than their size: once there
// are compactAt of them, the fetch or status commit that made the last one
// merges all but the largest into one pack of whole objects (compact; no
// git binary needed, nothing pruned, every object readable at every
// instant).
//
// # Writes to the tracked branch
//
// CommitFiles is the second write path: people-facing files (an approval,
// a node's labels, a rollout) that the hub commits to the tracked branch
// for an API caller, so that every write through the API is a commit in
// the config repository. The commit is authored and committed by the
// configured identity; the caller is recorded in a Fleetwave-Actor
// trailer (other trailers, e.g. Fleetwave-Reason, follow it, formatted as
// StatusMessage formats status commits). Paths are refused before
// anything is fetched when they could leave the repository, lie under
// status/, name git's own files (.git, .gitmodules, .gitattributes and
// their NTFS and HFS+ aliases) or nest inside one another; files over the
// size limit come back as an InvalidWriteError.
//
// Each attempt builds on the freshly fetched tip, as status commits do.
// The caller's Expect sees the current content of the touched paths there
// and may refuse (PreconditionError: "the approval must not exist yet",
// "the labels are still what the console showed"); a touched path that is
// a directory, a symbolic link or a submodule, or lies under a file, is
// refused the same way. The caller's Validate sees every file of the new
// tree, exactly as Files would return them, so the hub validates the
// whole result with its schema before anything is pushed
// (InvalidWriteError carrying the fleetwave.FileErrors). Both callbacks
// run outside the Repo's lock. The push is the same compare-and-swap on
// the tip; a lost race fetches, re-applies the same edits on the new tip,
// calls Expect again, and Validate again unless only status/ moved, and
// retries with backoff. It never force-pushes, so a person's commit, a
// status commit and a write never lose one another. A write that changes
// nothing makes no commit. A remote that cannot be reached fails with
// ErrRemoteUnavailable and nothing changes. CommitFiles calls are queued
// one at a time, so a hub's writes never race each other.
//
// These commits carry the hub's identity but never touch status/: the
// status writer passes over them when it looks for its own previous
// status commit (a commit of the hub's that changed status/), so a
// person's edit under status/ is still set back.
//
// # Following changes
//
// Watch notices pushes to a local remote through fsnotify (inotify on Linux) on its git
// directory (HEAD, packed-refs, refs/): the first event after a quiet
// spell notifies at once, the burst that may follow once more; remote URLs get
// ErrWatchUnsupported and are polled, or woken by a webhook the API checks
// with VerifyWebhook and WebhookBranch.
//
// # Signatures
//
// VerifyCommit maps a commit's OpenPGP or SSH signature to a configured
// identity; unsigned and unknown-signer commits are typed errors.
//
// # Losing the mirror
//
// The high-water marks live in the mirror directory. If it is lost, a new
// mirror recomputes generations from the history, which is the same unless
// the branch was force-pushed meanwhile; the hub keeps HighWater in
// status/summary.yaml and restores it with SeedHighWater after a re-clone.
package gitsync
