package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Writer collects metadata and tensors and writes them as one GGUF file.
type Writer struct {
	kvs       []KV
	tensors   []TensorInfo
	data      [][]byte
	keys      map[string]bool
	names     map[string]bool
	alignment uint64
}

// NewWriter returns an empty writer with the default alignment.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}, alignment: DefaultAlignment}
}

// AddKV appends a metadata entry. Keys must be unique; the value must be one
// of the types KV documents.
func (w *Writer) AddKV(key string, value any) error {
	if key == "" {
		return errors.New("gguf: empty metadata key")
	}
	if w.keys[key] {
		return fmt.Errorf("gguf: metadata key %q added twice", key)
	}
	if _, err := valueType(value); err != nil {
		return fmt.Errorf("gguf: metadata key %q: %w", key, err)
	}
	if key == "general.alignment" {
		a, ok := value.(uint32)
		if !ok || a == 0 || a%8 != 0 {
			return fmt.Errorf("gguf: general.alignment must be a uint32 multiple of 8, got %v", value)
		}
		w.alignment = uint64(a)
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Value: value})
	return nil
}

// AddF32 appends an F32 tensor. dims are in ggml order (innermost first).
func (w *Writer) AddF32(name string, dims []uint64, values []float32) error {
	if name == "" {
		return errors.New("gguf: empty tensor name")
	}
	if w.names[name] {
		return fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > 4 {
		return fmt.Errorf("gguf: tensor %q has %d dimensions, want 1 to 4", name, len(dims))
	}
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	if n != uint64(len(values)) {
		return fmt.Errorf("gguf: tensor %q has dims %v (%d elements) but %d values", name, dims, n, len(values))
	}
	buf := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: TensorF32})
	w.data = append(w.data, buf)
	return nil
}

func pad(n, align uint64) uint64 {
	return (n + align - 1) / align * align
}

// WriteTo writes the file. It returns the number of bytes written.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	var b bytes.Buffer
	b.WriteString(Magic)
	le := binary.LittleEndian
	_ = binary.Write(&b, le, uint32(Version))
	_ = binary.Write(&b, le, uint64(len(w.tensors)))
	_ = binary.Write(&b, le, uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		writeString(&b, kv.Key)
		if err := writeValue(&b, kv.Value, true); err != nil {
			return 0, fmt.Errorf("gguf: metadata key %q: %w", kv.Key, err)
		}
	}
	var off uint64
	for i := range w.tensors {
		t := &w.tensors[i]
		t.Offset = off
		writeString(&b, t.Name)
		_ = binary.Write(&b, le, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			_ = binary.Write(&b, le, d)
		}
		_ = binary.Write(&b, le, uint32(t.Type))
		_ = binary.Write(&b, le, t.Offset)
		off = pad(off+uint64(len(w.data[i])), w.alignment)
	}
	b.Write(make([]byte, pad(uint64(b.Len()), w.alignment)-uint64(b.Len())))
	for i, d := range w.data {
		b.Write(d)
		if i < len(w.data)-1 {
			b.Write(make([]byte, pad(uint64(len(d)), w.alignment)-uint64(len(d))))
		}
	}
	return b.WriteTo(out)
}

func writeString(b *bytes.Buffer, s string) {
	_ = binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

// valueType maps a Go value to its GGUF type (and element type for slices).
func valueType(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return TypeArray, nil
	}
	return 0, fmt.Errorf("unsupported metadata value type %T", v)
}

func writeValue(b *bytes.Buffer, v any, withType bool) error {
	t, err := valueType(v)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	if withType {
		_ = binary.Write(b, le, uint32(t))
	}
	switch x := v.(type) {
	case string:
		writeString(b, x)
	case bool:
		if x {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	case []string:
		_ = binary.Write(b, le, uint32(TypeString))
		_ = binary.Write(b, le, uint64(len(x)))
		for _, s := range x {
			writeString(b, s)
		}
	case []bool:
		_ = binary.Write(b, le, uint32(TypeBool))
		_ = binary.Write(b, le, uint64(len(x)))
		for _, e := range x {
			if e {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		}
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []uint64, []int64, []float64:
		et, n := sliceElem(x)
		_ = binary.Write(b, le, uint32(et))
		_ = binary.Write(b, le, uint64(n))
		_ = binary.Write(b, le, x)
	default:
		_ = binary.Write(b, le, x)
	}
	return nil
}

func sliceElem(v any) (ValueType, int) {
	switch x := v.(type) {
	case []uint8:
		return TypeUint8, len(x)
	case []int8:
		return TypeInt8, len(x)
	case []uint16:
		return TypeUint16, len(x)
	case []int16:
		return TypeInt16, len(x)
	case []uint32:
		return TypeUint32, len(x)
	case []int32:
		return TypeInt32, len(x)
	case []float32:
		return TypeFloat32, len(x)
	case []uint64:
		return TypeUint64, len(x)
	case []int64:
		return TypeInt64, len(x)
	case []float64:
		return TypeFloat64, len(x)
	}
	return 0, 0
}
