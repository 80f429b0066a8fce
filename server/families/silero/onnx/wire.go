package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Protocol buffer wire types (https://protobuf.dev/programming-guides/encoding/).
const (
	wireVarint = 0
	wireI64    = 1
	wireLen    = 2
	wireI32    = 5
)

// errTruncated is returned when a message ends in the middle of a field.
var errTruncated = errors.New("onnx: truncated protobuf message")

// field is one decoded protobuf field: its number, wire type and payload.
// For wireLen fields data is the payload (a sub-slice of the input, not a
// copy); for the others num holds the raw value.
type field struct {
	num  int
	wire int
	val  uint64
	data []byte
}

// reader walks the fields of one protobuf message.
type reader struct {
	buf []byte
	pos int
}

func uvarint(buf []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(buf); i++ {
		if i == 10 {
			return 0, 0, errors.New("onnx: varint longer than 10 bytes")
		}
		b := buf[i]
		v |= uint64(b&0x7f) << (7 * uint(i))
		if b < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errTruncated
}

// next returns the next field, or ok=false at the end of the message.
func (r *reader) next() (f field, ok bool, err error) {
	if r.pos >= len(r.buf) {
		return field{}, false, nil
	}
	key, n, err := uvarint(r.buf[r.pos:])
	if err != nil {
		return field{}, false, err
	}
	r.pos += n
	f.num = int(key >> 3)
	f.wire = int(key & 7)
	if f.num <= 0 {
		return field{}, false, fmt.Errorf("onnx: invalid field number %d", f.num)
	}
	switch f.wire {
	case wireVarint:
		v, n, err := uvarint(r.buf[r.pos:])
		if err != nil {
			return field{}, false, err
		}
		r.pos += n
		f.val = v
	case wireI64:
		if len(r.buf)-r.pos < 8 {
			return field{}, false, errTruncated
		}
		f.val = binary.LittleEndian.Uint64(r.buf[r.pos:])
		r.pos += 8
	case wireI32:
		if len(r.buf)-r.pos < 4 {
			return field{}, false, errTruncated
		}
		f.val = uint64(binary.LittleEndian.Uint32(r.buf[r.pos:]))
		r.pos += 4
	case wireLen:
		l, n, err := uvarint(r.buf[r.pos:])
		if err != nil {
			return field{}, false, err
		}
		r.pos += n
		if l > uint64(len(r.buf)-r.pos) {
			return field{}, false, errTruncated
		}
		f.data = r.buf[r.pos : r.pos+int(l)]
		r.pos += int(l)
	default:
		return field{}, false, fmt.Errorf("onnx: unsupported wire type %d for field %d", f.wire, f.num)
	}
	return f, true, nil
}

// each calls fn for every field of msg, stopping at the first error.
func each(msg []byte, fn func(f field) error) error {
	r := reader{buf: msg}
	for {
		f, ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}

// int64s appends a repeated int64 field, packed or not.
func int64s(dst []int64, f field) ([]int64, error) {
	switch f.wire {
	case wireVarint:
		return append(dst, int64(f.val)), nil
	case wireLen:
		b := f.data
		for len(b) > 0 {
			v, n, err := uvarint(b)
			if err != nil {
				return nil, err
			}
			dst = append(dst, int64(v))
			b = b[n:]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("onnx: field %d: wire type %d is not an int64 list", f.num, f.wire)
}

// float32s appends a repeated float field, packed or not.
func float32s(dst []float32, f field) ([]float32, error) {
	switch f.wire {
	case wireI32:
		return append(dst, math.Float32frombits(uint32(f.val))), nil
	case wireLen:
		if len(f.data)%4 != 0 {
			return nil, fmt.Errorf("onnx: field %d: packed floats of %d bytes", f.num, len(f.data))
		}
		for i := 0; i < len(f.data); i += 4 {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(f.data[i:])))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("onnx: field %d: wire type %d is not a float list", f.num, f.wire)
}

func wantWire(f field, wire int, what string) error {
	if f.wire != wire {
		return fmt.Errorf("onnx: %s (field %d) has wire type %d, want %d", what, f.num, f.wire, wire)
	}
	return nil
}
