package check

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// errIndexFormat makes readIndex's caller fall back to go-git's decoder.
var errIndexFormat = errors.New("index format not handled here")

// readIndex reads the entries of .git/index (versions 2, 3 and 4, SHA-1)
// into go-git's index type. It decodes only what the check uses and skips
// the extensions; go-git's decoder reads every field through reflection and
// costs several times more on large indexes. Anything it does not handle
// (another version, a split index, a truncated file) returns errIndexFormat.
func readIndex(gitDir string) (*index.Index, error) {
	data, err := os.ReadFile(filepath.Join(gitDir, "index"))
	if err != nil {
		if os.IsNotExist(err) {
			return &index.Index{Version: 2}, nil // no index yet: nothing tracked
		}
		return nil, err
	}
	if len(data) < 12+20 || string(data[:4]) != "DIRC" {
		return nil, fmt.Errorf("%w: no DIRC header", errIndexFormat)
	}
	version := binary.BigEndian.Uint32(data[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("%w: version %d", errIndexFormat, version)
	}
	count := int(binary.BigEndian.Uint32(data[8:12]))
	body := data[:len(data)-20] // the trailing checksum
	idx := &index.Index{Version: version, Entries: make([]*index.Entry, 0, count)}
	pos := 12
	var prev []byte
	for i := 0; i < count; i++ {
		start := pos
		if pos+62 > len(body) {
			return nil, fmt.Errorf("%w: truncated entry %d", errIndexFormat, i)
		}
		u32 := func(off int) uint32 { return binary.BigEndian.Uint32(body[pos+off:]) }
		e := &index.Entry{
			Dev:   u32(16),
			Inode: u32(20),
			Mode:  filemode.FileMode(u32(24)),
			UID:   u32(28),
			GID:   u32(32),
			Size:  u32(36),
		}
		// Zero times stay the zero time.Time, as go-git decodes them.
		if sec, nsec := u32(0), u32(4); sec != 0 || nsec != 0 {
			e.CreatedAt = time.Unix(int64(sec), int64(nsec))
		}
		if sec, nsec := u32(8), u32(12); sec != 0 || nsec != 0 {
			e.ModifiedAt = time.Unix(int64(sec), int64(nsec))
		}
		copy(e.Hash[:], body[pos+40:pos+60])
		flags := binary.BigEndian.Uint16(body[pos+60:])
		pos += 62
		e.Stage = index.Stage((flags >> 12) & 3)
		if flags&0x4000 != 0 {
			if version < 3 || pos+2 > len(body) {
				return nil, fmt.Errorf("%w: extended flags in entry %d", errIndexFormat, i)
			}
			ext := binary.BigEndian.Uint16(body[pos:])
			e.SkipWorktree = ext&0x4000 != 0
			e.IntentToAdd = ext&0x2000 != 0
			pos += 2
		}
		var name []byte
		if version == 4 {
			strip, n := varint(body[pos:])
			if n <= 0 || strip > len(prev) {
				return nil, fmt.Errorf("%w: bad name prefix in entry %d", errIndexFormat, i)
			}
			pos += n
			end := bytes.IndexByte(body[pos:], 0)
			if end < 0 {
				return nil, fmt.Errorf("%w: unterminated name in entry %d", errIndexFormat, i)
			}
			name = make([]byte, 0, len(prev)-strip+end)
			name = append(append(name, prev[:len(prev)-strip]...), body[pos:pos+end]...)
			pos += end + 1
		} else {
			end := bytes.IndexByte(body[pos:], 0)
			if end < 0 {
				return nil, fmt.Errorf("%w: unterminated name in entry %d", errIndexFormat, i)
			}
			name = body[pos : pos+end]
			// Entries are NUL-padded to a multiple of 8 bytes (at least one NUL).
			size := (pos + end - start + 8) &^ 7
			pos = start + size
		}
		prev = name
		e.Name = string(name)
		idx.Entries = append(idx.Entries, e)
	}
	if pos > len(body) {
		return nil, fmt.Errorf("%w: entries overrun the file", errIndexFormat)
	}
	// A split index ("link" extension) keeps entries in a shared file.
	for ext := pos; ext+8 <= len(body); {
		sig := string(body[ext : ext+4])
		size := int(binary.BigEndian.Uint32(body[ext+4:]))
		if sig == "link" || sig == "sdir" {
			return nil, fmt.Errorf("%w: extension %q", errIndexFormat, sig)
		}
		ext += 8 + size
	}
	return idx, nil
}

// varint decodes git's offset encoding (index v4 name prefixes).
func varint(b []byte) (int, int) {
	if len(b) == 0 {
		return 0, 0
	}
	v := int(b[0] & 0x7f)
	n := 1
	for b[n-1]&0x80 != 0 {
		if n >= len(b) || n > 8 {
			return 0, -1
		}
		v = ((v + 1) << 7) | int(b[n]&0x7f)
		n++
	}
	return v, n
}
