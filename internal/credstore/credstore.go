// Package credstore is a small durable, encrypted store of generated
// credentials keyed by (scope, name), for values that must outlive Redis and
// must not enter Git in plain text (docs/contract.md#status-written-back).
//
// The whole store is one file in a directory, sealed with AES-256-GCM under
// a 32-byte key the caller provides, and replaced atomically on each new
// credential (temporary file, fsync, rename, fsync of the directory), so a
// crash leaves the old or the new file, never a torn one. Values are
// generated with crypto/rand once and returned unchanged afterwards, also
// after reopening. No error ever contains a credential value.
//
// Several processes may share the directory (hub replicas on one machine
// or on a shared volume): a new credential is created under an exclusive
// lock on FileName.lock after re-reading the file, so two processes asking
// for the same credential at once get the same value.
package credstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// FileName is the store's file inside its directory.
const FileName = "credentials.enc"

// KeySize is the size of the AES-256 key.
const KeySize = 32

// Length bounds of generated credentials.
const (
	MinLength = 8
	MaxLength = 256
)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// ErrBadKey: the key is not KeySize bytes.
var ErrBadKey = errors.New("credstore: key must be 32 bytes")

// ErrDecrypt: the file does not open with the key (wrong key or tampered).
var ErrDecrypt = errors.New("credstore: cannot decrypt the store (wrong key or corrupted file)")

// Store is an open credential store, safe for concurrent use, also by
// several processes sharing its directory.
type Store struct {
	dir  string
	aead cipher.AEAD
	mu   sync.Mutex
	data map[string]map[string]string // scope -> name -> value
}

// Open opens (or creates, on the first write) the store in dir with key.
func Open(dir string, key []byte) (*Store, error) {
	if len(key) != KeySize {
		return nil, ErrBadKey
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credstore: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("credstore: %w", err)
	}
	s := &Store{dir: dir, aead: aead, data: map[string]map[string]string{}}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load replaces the in-memory data with the file's (nothing when there is
// no file yet).
func (s *Store) load() error {
	sealed, err := os.ReadFile(filepath.Join(s.dir, FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("credstore: read: %w", err)
	}
	ns := s.aead.NonceSize()
	if len(sealed) < ns {
		return ErrDecrypt
	}
	plain, err := s.aead.Open(nil, sealed[:ns], sealed[ns:], []byte(FileName))
	if err != nil {
		return ErrDecrypt
	}
	data := map[string]map[string]string{}
	if err := json.Unmarshal(plain, &data); err != nil {
		return ErrDecrypt
	}
	s.data = data
	return nil
}

// lock takes the exclusive inter-process lock of the directory.
func (s *Store) lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.dir, FileName+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// GetOrCreate returns the credential name of scope, generating a random one
// of length characters ([A-Za-z0-9]) and persisting it durably first when it
// does not exist. An existing credential is returned as stored, whatever
// length is asked. Errors name the scope and name, never the value.
func (s *Store) GetOrCreate(scope, name string, length int) (string, error) {
	if scope == "" || name == "" {
		return "", errors.New("credstore: scope and name are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.data[scope][name]; ok {
		return v, nil
	}
	if length < MinLength || length > MaxLength {
		return "", fmt.Errorf("credstore: length %d is not within %d-%d", length, MinLength, MaxLength)
	}
	// Another process may have created it since this one read the file.
	unlock, err := s.lock()
	if err != nil {
		return "", fmt.Errorf("credstore: lock: %w", err)
	}
	defer unlock()
	if err := s.load(); err != nil {
		return "", err
	}
	if v, ok := s.data[scope][name]; ok {
		return v, nil
	}
	v, err := generate(length)
	if err != nil {
		return "", err
	}
	if s.data[scope] == nil {
		s.data[scope] = map[string]string{}
	}
	s.data[scope][name] = v
	if err := s.save(); err != nil {
		delete(s.data[scope], name)
		return "", fmt.Errorf("credstore: persist %s/%s: %w", scope, name, err)
	}
	return v, nil
}

func generate(length int) (string, error) {
	out := make([]byte, 0, length)
	buf := make([]byte, 64)
	const limit = 256 - 256%len(alphabet) // reject to avoid modulo bias
	for len(out) < length {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("credstore: random: %w", err)
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < length {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}

// save writes the sealed store atomically and durably.
func (s *Store) save() error {
	plain, err := json.Marshal(s.data)
	if err != nil {
		return err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(FileName))
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, FileName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(sealed); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, FileName)); err != nil {
		return err
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
