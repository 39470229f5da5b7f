package gitsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// SignerKeys maps an identity (as the hub config names it, e.g. an email)
// to its public key: an armored OpenPGP public key block, or one SSH
// authorized_keys line ("ssh-ed25519 AAAA... comment"; options and
// certificates are not supported).
type SignerKeys map[string]string

// SignatureFormat is the kind of a commit signature.
type SignatureFormat string

// Signature formats.
const (
	FormatOpenPGP SignatureFormat = "openpgp"
	FormatSSH     SignatureFormat = "ssh"
)

func (f SignatureFormat) String() string { return string(f) }

// Signer is the verified signer of a commit.
type Signer struct {
	Identity    string          // the SignerKeys key whose public key verified the signature
	Format      SignatureFormat // openpgp or ssh
	Fingerprint string          // OpenPGP fingerprint (hex) or SSH "SHA256:..." fingerprint
}

// ErrUnsigned is returned by VerifyCommit for a commit without a signature.
var ErrUnsigned = errors.New("commit is not signed")

// UnknownSignerError is returned by VerifyCommit when the commit is signed
// but no configured key verifies the signature: an unknown signer, a
// tampered commit, an expired key or an unsupported signature.
type UnknownSignerError struct {
	Commit string
	Format SignatureFormat // "" when the signature is of no known format
	KeyID  string          // the OpenPGP issuer key id or the SSH fingerprint, when readable
	Reason string
}

func (e *UnknownSignerError) Error() string {
	s := fmt.Sprintf("commit %s: signature not verified by any configured key", e.Commit)
	if e.Format != "" {
		s += " (" + string(e.Format)
		if e.KeyID != "" {
			s += " key " + e.KeyID
		}
		s += ")"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Check parses every key and reports the ones that are neither an armored
// OpenPGP public key nor an SSH authorized_keys line. The hub calls it when
// it loads its config.
func (k SignerKeys) Check() error {
	var errs []error
	for _, id := range k.identities() {
		key := strings.TrimSpace(k[id])
		switch {
		case strings.HasPrefix(key, "-----BEGIN PGP PUBLIC KEY BLOCK-----"):
			if _, err := openpgp.ReadArmoredKeyRing(strings.NewReader(key)); err != nil {
				errs = append(errs, fmt.Errorf("signer %q: openpgp key: %w", id, err))
			}
		default:
			if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); err != nil {
				errs = append(errs, fmt.Errorf("signer %q: neither an armored OpenPGP public key nor an SSH authorized_keys line: %w", id, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (k SignerKeys) identities() []string {
	ids := make([]string, 0, len(k))
	for id := range k {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// VerifyCommit verifies the signature of commit (a full hash present in
// the mirror) against keys and returns who signed it. OpenPGP signatures
// are checked with go-git (against the current time: a since-expired key or
// signature fails); SSH signatures (git's gpg.format=ssh) per the sshsig
// format with namespace "git". It returns ErrUnsigned for an unsigned
// commit and an *UnknownSignerError when no key verifies the signature.
// An unsigned or unknown-signer commit must never approve anything.
func (r *Repo) VerifyCommit(ctx context.Context, commit string, keys SignerKeys) (Signer, error) {
	if err := ctx.Err(); err != nil {
		return Signer{}, err
	}
	defer r.lock("VerifyCommit")()
	if err := r.usable(); err != nil {
		return Signer{}, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return Signer{}, err
	}
	return verifyCommit(c, keys)
}

func verifyCommit(c *object.Commit, keys SignerKeys) (Signer, error) {
	sig := strings.TrimSpace(c.PGPSignature)
	switch {
	case sig == "":
		return Signer{}, fmt.Errorf("commit %s: %w", c.Hash, ErrUnsigned)
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		return verifyOpenPGP(c, sig, keys)
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		return verifySSH(c, sig, keys)
	default:
		return Signer{}, &UnknownSignerError{Commit: c.Hash.String(), Reason: "unsupported signature format (x509 or unknown)"}
	}
}

func verifyOpenPGP(c *object.Commit, sig string, keys SignerKeys) (Signer, error) {
	keyID := ""
	if blk, err := armor.Decode(strings.NewReader(sig)); err == nil {
		if p, err := packet.Read(blk.Body); err == nil {
			if s, ok := p.(*packet.Signature); ok && s.IssuerKeyId != nil {
				keyID = fmt.Sprintf("%016X", *s.IssuerKeyId)
			}
		}
	}
	var lastErr error
	for _, id := range keys.identities() {
		key := strings.TrimSpace(keys[id])
		if !strings.HasPrefix(key, "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
			continue
		}
		ent, err := c.Verify(key)
		if err != nil {
			// Verify may return an entity with an error (expired): a failure
			if !errors.Is(err, io.EOF) {
				lastErr = err
			}
			continue
		}
		fp := ""
		if ent != nil && ent.PrimaryKey != nil {
			fp = strings.ToUpper(hex.EncodeToString(ent.PrimaryKey.Fingerprint))
		}
		return Signer{Identity: id, Format: FormatOpenPGP, Fingerprint: fp}, nil
	}
	e := &UnknownSignerError{Commit: c.Hash.String(), Format: FormatOpenPGP, KeyID: keyID, Reason: "no configured key signed it"}
	if lastErr != nil && !strings.Contains(lastErr.Error(), "signature made by unknown entity") {
		e.Reason = lastErr.Error()
	}
	return Signer{}, e
}

// sshSig is an SSH signature blob after its "SSHSIG" preamble
// (PROTOCOL.sshsig in OpenSSH).
type sshSig struct {
	Version       uint32
	PublicKey     []byte
	Namespace     string
	Reserved      string
	HashAlgorithm string
	Signature     []byte
}

const sshSigMagic = "SSHSIG"

func verifySSH(c *object.Commit, armored string, keys SignerKeys) (Signer, error) {
	unknown := func(keyID, reason string) error {
		return &UnknownSignerError{Commit: c.Hash.String(), Format: FormatSSH, KeyID: keyID, Reason: reason}
	}
	blob, err := unarmorSSHSig(armored)
	if err != nil {
		return Signer{}, unknown("", err.Error())
	}
	var s sshSig
	if !bytes.HasPrefix(blob, []byte(sshSigMagic)) {
		return Signer{}, unknown("", "no SSHSIG preamble")
	}
	if err := ssh.Unmarshal(blob[len(sshSigMagic):], &s); err != nil {
		return Signer{}, unknown("", "malformed signature: "+err.Error())
	}
	if s.Version != 1 {
		return Signer{}, unknown("", fmt.Sprintf("signature version %d", s.Version))
	}
	sigKey, err := ssh.ParsePublicKey(s.PublicKey)
	if err != nil {
		return Signer{}, unknown("", "signature public key: "+err.Error())
	}
	fp := ssh.FingerprintSHA256(sigKey)
	if s.Namespace != "git" {
		return Signer{}, unknown(fp, fmt.Sprintf("namespace %q, want \"git\"", s.Namespace))
	}
	var h hash.Hash
	switch s.HashAlgorithm {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return Signer{}, unknown(fp, fmt.Sprintf("hash algorithm %q", s.HashAlgorithm))
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(s.Signature, &sig); err != nil {
		return Signer{}, unknown(fp, "malformed signature: "+err.Error())
	}
	payload := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(payload); err != nil {
		return Signer{}, fmt.Errorf("encode commit %s: %w", c.Hash, err)
	}
	rd, err := payload.Reader()
	if err != nil {
		return Signer{}, err
	}
	if _, err := io.Copy(h, rd); err != nil {
		return Signer{}, err
	}
	signed := append([]byte(sshSigMagic), ssh.Marshal(struct {
		Namespace, Reserved, HashAlgorithm string
		Hash                               []byte
	}{s.Namespace, s.Reserved, s.HashAlgorithm, h.Sum(nil)})...)

	for _, id := range keys.identities() {
		key := strings.TrimSpace(keys[id])
		if strings.HasPrefix(key, "-----BEGIN") {
			continue
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
		if err != nil || !bytes.Equal(pub.Marshal(), sigKey.Marshal()) {
			continue
		}
		if err := pub.Verify(signed, &sig); err != nil {
			return Signer{}, unknown(fp, "bad signature: "+err.Error())
		}
		return Signer{Identity: id, Format: FormatSSH, Fingerprint: fp}, nil
	}
	return Signer{}, unknown(fp, "no configured key signed it")
}

func unarmorSSHSig(armored string) ([]byte, error) {
	const begin, end = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"
	body, ok := strings.CutPrefix(strings.TrimSpace(armored), begin)
	if !ok {
		return nil, errors.New("not an armored SSH signature")
	}
	body, ok = strings.CutSuffix(body, end)
	if !ok {
		return nil, errors.New("armored SSH signature has no end line")
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(body), ""))
	if err != nil {
		return nil, fmt.Errorf("armored SSH signature: %w", err)
	}
	return b, nil
}
