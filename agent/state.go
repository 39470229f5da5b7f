package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/fleetwave/fleetwave"
)

// ErrStateCorrupted is returned by Run when state.json cannot be trusted: it
// does not parse, or it belongs to another node. The file is left as is for
// the operator to inspect.
var ErrStateCorrupted = errors.New("agent state corrupted")

// stateVersion is the format version of state.json.
const stateVersion = 1

// maxJournal bounds the attempt journal; the oldest delivered entries go
// first. Attempt ids are unique per item dispatch, so an id older than this
// many attempts is not re-delivered in practice.
const maxJournal = 1024

// Journal entry states.
const (
	journalStarted = "started"
	journalDone    = "done"
)

// state is the content of state.json.
type state struct {
	Version   int                                 `json:"version"`
	Node      string                              `json:"node"`
	MaxFence  int64                               `json:"max_fence"`
	NextSeq   int64                               `json:"next_seq"`
	Instances map[string]fleetwave.InstanceStatus `json:"instances"`
	Journal   map[string]*journalEntry            `json:"journal"`
	// LastDelivery is the highest delivery number (fleetwave.Attempt's
	// Delivery) of the attempts journalled: saved with the journal entry,
	// before the attempt runs, so the agent never says it did not receive
	// what it ran.
	LastDelivery int64 `json:"last_delivery,omitempty"`
	// Receipts says LastDelivery counts every attempt this state
	// journalled: a state created by an agent that keeps it. A state of an
	// older agent says nothing of what it received until it journals a
	// numbered attempt.
	Receipts bool `json:"receipts,omitempty"`
}

// receipt is what the agent says of the deliveries it received in its
// next poll; resume when its previous poll failed (or it just started).
// It asks for nothing to be sent again while its state cannot say what it
// received.
func (s *store) receipt(resume bool) fleetwave.Receipt {
	knows := s.st.Receipts || s.st.LastDelivery > 0
	return fleetwave.Receipt{Delivered: s.st.LastDelivery, Resume: resume && knows}
}

// journalEntry records one attempt the agent accepted or refused.
type journalEntry struct {
	Seq       int64                    `json:"seq"`
	Status    string                   `json:"status"`
	Fence     int64                    `json:"fence"`
	StartedAt time.Time                `json:"started_at,omitzero"`
	DoneAt    time.Time                `json:"done_at,omitzero"`
	Result    *fleetwave.AttemptResult `json:"result,omitempty"`
	// Delivered is set once the hub accepted (or definitively refused) the result.
	Delivered bool `json:"delivered,omitempty"`
}

// store owns state.json and the lock of the state directory. Its methods
// are not synchronised: the agent guards it with its mutex.
type store struct {
	dir  string
	st   state
	lock *os.File
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// openStore locks dir and loads its state (an absent file is a fresh
// state). Attempts journalled "started" are turned into "lost" results to
// deliver: the agent died while they ran, so they are never re-run.
func openStore(dir, node string, now time.Time) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("state dir %s is used by another agent: %w", dir, err)
	}
	s := &store{dir: dir, lock: lock}
	if err := s.load(node); err != nil {
		s.close()
		return nil, err
	}
	recovered := false
	for id, e := range s.st.Journal {
		if e.Status != journalStarted {
			continue
		}
		e.Status, e.DoneAt, e.Delivered, recovered = journalDone, now, false, true
		e.Result = &fleetwave.AttemptResult{
			AttemptID: id,
			Fence:     e.Fence,
			Class:     fleetwave.ResultLost,
			ExitCode:  -1,
			Output:    "agent stopped while the attempt was running; not run again",
		}
	}
	if recovered {
		if err := s.save(); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *store) load(node string) error {
	s.st = state{Version: stateVersion, Node: node}
	b, err := os.ReadFile(statePath(s.dir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.st.Receipts = true
	case err != nil:
		return fmt.Errorf("read state: %w", err)
	default:
		var st state
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrStateCorrupted, statePath(s.dir), err)
		}
		if st.Version != stateVersion {
			return fmt.Errorf("%w: %s: unknown format version %d", ErrStateCorrupted, statePath(s.dir), st.Version)
		}
		if st.Node != node {
			return fmt.Errorf("%w: %s belongs to node %q, not %q", ErrStateCorrupted, statePath(s.dir), st.Node, node)
		}
		for id, e := range st.Journal {
			if e == nil || (e.Status != journalStarted && e.Status != journalDone) || (e.Status == journalDone && e.Result == nil) {
				return fmt.Errorf("%w: %s: bad journal entry for attempt %q", ErrStateCorrupted, statePath(s.dir), id)
			}
		}
		s.st = st
	}
	if s.st.Instances == nil {
		s.st.Instances = map[string]fleetwave.InstanceStatus{}
	}
	if s.st.Journal == nil {
		s.st.Journal = map[string]*journalEntry{}
	}
	return nil
}

// save prunes the journal and writes state.json atomically: temp file,
// fsync, rename, fsync of the directory.
func (s *store) save() error {
	s.prune()
	b, err := json.MarshalIndent(&s.st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	return writeFileAtomic(statePath(s.dir), append(b, '\n'), 0o600)
}

// prune drops the oldest delivered entries beyond maxJournal.
func (s *store) prune() {
	if len(s.st.Journal) <= maxJournal {
		return
	}
	type seqID struct {
		seq int64
		id  string
	}
	var old []seqID
	for id, e := range s.st.Journal {
		if e.Status == journalDone && e.Delivered {
			old = append(old, seqID{e.Seq, id})
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].seq < old[j].seq })
	for _, o := range old {
		if len(s.st.Journal) <= maxJournal {
			break
		}
		delete(s.st.Journal, o.id)
	}
}

// record adds or replaces the journal entry of attempt id.
func (s *store) record(id string, e *journalEntry) {
	s.st.NextSeq++
	e.Seq = s.st.NextSeq
	s.st.Journal[id] = e
}

// undelivered returns the ids of done entries whose result the hub has not
// taken yet, oldest first.
func (s *store) undelivered() []string {
	var ids []string
	for id, e := range s.st.Journal {
		if e.Status == journalDone && !e.Delivered {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return s.st.Journal[ids[i]].Seq < s.st.Journal[ids[j]].Seq })
	return ids
}

func (s *store) close() {
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		s.lock.Close()
		s.lock = nil
	}
}

// writeFileAtomic replaces path with data so that a crash leaves either the
// old or the new content, both durable.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
