package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
)

// File is a parsed GGUF file held in memory.
type File struct {
	Version    uint32
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // start of the data section in the file
	raw        []byte
}

// ErrNotGGUF is returned for input that does not start with the GGUF magic.
var ErrNotGGUF = errors.New("gguf: not a GGUF file (bad magic)")

// Open reads and parses the GGUF file at path.
func Open(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

type decoder struct {
	buf []byte
	pos uint64
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("gguf: "+format, args...)
	}
}

func (d *decoder) remaining() uint64 { return uint64(len(d.buf)) - d.pos }

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > d.remaining() {
		d.fail("truncated at byte %d (need %d more bytes, have %d)", d.pos, n, d.remaining())
		return nil
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b
}

func (d *decoder) u8() uint8 {
	b := d.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *decoder) u16() uint16 {
	b := d.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (d *decoder) u32() uint32 {
	b := d.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *decoder) u64() uint64 {
	b := d.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (d *decoder) str() string {
	n := d.u64()
	return string(d.bytes(n))
}

// Parse decodes a GGUF file from memory. The returned File refers to data
// (tensor bytes are not copied), so data must not be modified afterwards.
func Parse(data []byte) (*File, error) {
	d := &decoder{buf: data}
	if string(d.bytes(4)) != Magic {
		return nil, ErrNotGGUF
	}
	f := &File{raw: data, Alignment: DefaultAlignment}
	f.Version = d.u32()
	if d.err == nil && (f.Version < 2 || f.Version > Version) {
		return nil, fmt.Errorf("gguf: version %d is not supported (this reader handles versions 2 and 3)", f.Version)
	}
	nTensors := d.u64()
	nKV := d.u64()
	if d.err != nil {
		return nil, d.err
	}
	// Every entry takes at least 12 bytes: a bound that stops absurd counts
	// before any allocation.
	if nKV > d.remaining()/12 || nTensors > d.remaining()/12 {
		return nil, fmt.Errorf("gguf: header claims %d metadata entries and %d tensors, more than the file can hold", nKV, nTensors)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nKV && d.err == nil; i++ {
		key := d.str()
		t := ValueType(d.u32())
		v := d.value(t, true)
		if d.err != nil {
			return nil, fmt.Errorf("%w (metadata entry %d %q)", d.err, i, key)
		}
		if seen[key] {
			return nil, fmt.Errorf("gguf: metadata key %q appears twice", key)
		}
		seen[key] = true
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("gguf: general.alignment must be a power-of-two uint32, got %v", v)
			}
			f.Alignment = uint64(a)
		}
	}
	names := map[string]bool{}
	for i := uint64(0); i < nTensors && d.err == nil; i++ {
		var t TensorInfo
		t.Name = d.str()
		nd := d.u32()
		if d.err == nil && (nd == 0 || nd > 4) {
			return nil, fmt.Errorf("gguf: tensor %q has %d dimensions, want 1 to 4", t.Name, nd)
		}
		elems := uint64(1)
		for j := uint32(0); j < nd && d.err == nil; j++ {
			dim := d.u64()
			if dim != 0 && elems > math.MaxInt64/8/dim {
				return nil, fmt.Errorf("gguf: tensor %q is too large", t.Name)
			}
			elems *= dim
			t.Dims = append(t.Dims, dim)
		}
		t.Type = TensorType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			break
		}
		if t.Type.ElementSize() == 0 {
			return nil, fmt.Errorf("gguf: tensor %q has type %d; only f32 and f16 are supported", t.Name, uint32(t.Type))
		}
		if names[t.Name] {
			return nil, fmt.Errorf("gguf: tensor %q appears twice", t.Name)
		}
		names[t.Name] = true
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	f.DataOffset = pad(d.pos, f.Alignment)
	if f.DataOffset > uint64(len(data)) {
		if len(f.Tensors) > 0 {
			return nil, fmt.Errorf("gguf: truncated before the data section")
		}
		f.DataOffset = uint64(len(data))
	}
	dataLen := uint64(len(data)) - f.DataOffset
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("gguf: tensor %q data offset %d is not aligned to %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > dataLen || t.Size() > dataLen-t.Offset {
			return nil, fmt.Errorf("gguf: tensor %q data (offset %d, %d bytes) runs past the end of the file", t.Name, t.Offset, t.Size())
		}
	}
	return f, nil
}

func (d *decoder) value(t ValueType, allowArray bool) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if b > 1 {
			d.fail("bool value %d is neither 0 nor 1", b)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if !allowArray {
			d.fail("nested arrays are not supported")
			return nil
		}
		et := ValueType(d.u32())
		n := d.u64()
		if d.err != nil {
			return nil
		}
		return d.array(et, n)
	}
	d.fail("unknown metadata value type %d", uint32(t))
	return nil
}

func (d *decoder) array(et ValueType, n uint64) any {
	// Each element takes at least one byte (strings eight): bound n by
	// what is left before allocating.
	if n > d.remaining() {
		d.fail("array of %d elements is longer than the rest of the file", n)
		return nil
	}
	switch et {
	case TypeString:
		if n > d.remaining()/8 {
			d.fail("array of %d strings is longer than the rest of the file", n)
			return nil
		}
		out := make([]string, 0, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			out = append(out, d.str())
		}
		return out
	case TypeArray:
		d.fail("nested arrays are not supported")
		return nil
	}
	var typed any
	switch et {
	case TypeUint8:
		typed = collect(d, n, (*decoder).u8)
	case TypeInt8:
		typed = collect(d, n, func(d *decoder) int8 { return int8(d.u8()) })
	case TypeUint16:
		typed = collect(d, n, (*decoder).u16)
	case TypeInt16:
		typed = collect(d, n, func(d *decoder) int16 { return int16(d.u16()) })
	case TypeUint32:
		typed = collect(d, n, (*decoder).u32)
	case TypeInt32:
		typed = collect(d, n, func(d *decoder) int32 { return int32(d.u32()) })
	case TypeFloat32:
		typed = collect(d, n, func(d *decoder) float32 { return math.Float32frombits(d.u32()) })
	case TypeBool:
		typed = collect(d, n, func(d *decoder) bool { return d.value(TypeBool, false).(bool) })
	case TypeUint64:
		typed = collect(d, n, (*decoder).u64)
	case TypeInt64:
		typed = collect(d, n, func(d *decoder) int64 { return int64(d.u64()) })
	case TypeFloat64:
		typed = collect(d, n, func(d *decoder) float64 { return math.Float64frombits(d.u64()) })
	default:
		d.fail("unknown array element type %d", uint32(et))
		return nil
	}
	return typed
}

func collect[T any](d *decoder, n uint64, read func(*decoder) T) []T {
	out := make([]T, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, read(d))
	}
	return out
}

// Get returns the metadata value for key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// String returns the string metadata value for key, or an error that names
// the key when it is missing or not a string.
func (f *File) String(key string) (string, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", fmt.Errorf("gguf: metadata key %q is missing", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("gguf: metadata key %q is %T, want string", key, v)
	}
	return s, nil
}

// Uint32 returns the uint32 metadata value for key.
func (f *File) Uint32(key string) (uint32, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata key %q is missing", key)
	}
	u, ok := v.(uint32)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata key %q is %T, want uint32", key, v)
	}
	return u, nil
}

// Tensor returns the description of the tensor called name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

// Data returns the raw bytes of a tensor (a sub-slice of the file).
func (f *File) Data(t *TensorInfo) []byte {
	start := f.DataOffset + t.Offset
	return f.raw[start : start+t.Size()]
}

// F32 returns a copy of an F32 tensor's values with its dims, checking that
// the tensor exists, is F32 and has the expected dims (ggml order) when want
// is not nil.
func (f *File) F32(name string, want ...uint64) ([]float32, []uint64, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil, fmt.Errorf("gguf: tensor %q is missing", name)
	}
	if t.Type != TensorF32 {
		return nil, nil, fmt.Errorf("gguf: tensor %q is %s, want f32", name, t.Type)
	}
	if want != nil {
		same := len(want) == len(t.Dims)
		for i := 0; same && i < len(want); i++ {
			same = want[i] == t.Dims[i]
		}
		if !same {
			return nil, nil, fmt.Errorf("gguf: tensor %q has dims %v, want %v", name, t.Dims, want)
		}
	}
	raw := f.Data(t)
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, t.Dims, nil
}
