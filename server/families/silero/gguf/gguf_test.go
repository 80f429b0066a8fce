package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sample(t testing.TB) *Writer {
	w := NewWriter()
	kvs := []KV{
		{"general.architecture", "test"},
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"bool", true},
		{"u64", uint64(1) << 40}, {"i64", int64(-1) << 40}, {"f64", math.Pi},
		{"strs", []string{"a", "", "ccc"}}, {"u32s", []uint32{16000, 8000}}, {"f32s", []float32{0.25, -2}},
		{"bools", []bool{true, false}}, {"i64s", []int64{-1, 2}},
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddF32("a", []uint64{3, 2}, []float32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddF32("b", []uint64{1}, []float32{-9}); err != nil {
		t.Fatal(err)
	}
	return w
}

func encode(t testing.TB, w *Writer) []byte {
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	w := sample(t)
	data := encode(t, w)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != Version || len(f.KVs) != len(w.kvs) || len(f.Tensors) != 2 {
		t.Fatalf("version %d, %d kvs, %d tensors", f.Version, len(f.KVs), len(f.Tensors))
	}
	for i, kv := range w.kvs {
		if f.KVs[i].Key != kv.Key || !reflect.DeepEqual(f.KVs[i].Value, kv.Value) {
			t.Errorf("kv %d: got %v=%#v, want %v=%#v", i, f.KVs[i].Key, f.KVs[i].Value, kv.Key, kv.Value)
		}
	}
	v, dims, err := f.F32("a", 3, 2)
	if err != nil || !reflect.DeepEqual(v, []float32{1, 2, 3, 4, 5, 6}) || !reflect.DeepEqual(dims, []uint64{3, 2}) {
		t.Errorf("tensor a: %v %v %v", v, dims, err)
	}
	if _, _, err := f.F32("a", 2, 3); err == nil {
		t.Error("wrong dims accepted")
	}
	if _, _, err := f.F32("missing"); err == nil {
		t.Error("missing tensor accepted")
	}
	for _, tt := range f.Tensors {
		if tt.Offset%DefaultAlignment != 0 || (f.DataOffset+tt.Offset)%DefaultAlignment != 0 {
			t.Errorf("tensor %s at %d is not aligned", tt.Name, tt.Offset)
		}
	}
	if s, err := f.String("general.architecture"); err != nil || s != "test" {
		t.Errorf("String: %q %v", s, err)
	}
	if _, err := f.String("u32"); err == nil {
		t.Error("String of a uint32 accepted")
	}
	if u, err := f.Uint32("u32"); err != nil || u != 70000 {
		t.Errorf("Uint32: %d %v", u, err)
	}
}

func TestDeterministic(t *testing.T) {
	if !bytes.Equal(encode(t, sample(t)), encode(t, sample(t))) {
		t.Fatal("same input, different bytes")
	}
}

// TestLayout checks the header fields byte by byte against the GGUF spec.
func TestLayout(t *testing.T) {
	w := NewWriter()
	w.AddKV("k", uint32(5))
	w.AddF32("t", []uint64{2}, []float32{1, 2})
	d := encode(t, w)
	le := binary.LittleEndian
	want := []byte("GGUF")
	want = le.AppendUint32(want, 3)
	want = le.AppendUint64(want, 1) // tensors
	want = le.AppendUint64(want, 1) // kvs
	want = le.AppendUint64(want, 1)
	want = append(want, 'k')
	want = le.AppendUint32(want, uint32(TypeUint32))
	want = le.AppendUint32(want, 5)
	want = le.AppendUint64(want, 1)
	want = append(want, 't')
	want = le.AppendUint32(want, 1) // n_dims
	want = le.AppendUint64(want, 2)
	want = le.AppendUint32(want, uint32(TensorF32))
	want = le.AppendUint64(want, 0) // offset
	for len(want)%32 != 0 {
		want = append(want, 0)
	}
	want = le.AppendUint32(want, math.Float32bits(1))
	want = le.AppendUint32(want, math.Float32bits(2))
	if !bytes.Equal(d, want) {
		t.Fatalf("bytes\n%x\nwant\n%x", d, want)
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	if err := w.AddKV("a", uint32(1)); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		w.AddKV("a", uint32(2)),
		w.AddKV("", "x"),
		w.AddKV("b", struct{}{}),
		w.AddKV("general.alignment", uint32(3)),
		w.AddF32("t", []uint64{2}, []float32{1}),
		w.AddF32("", []uint64{1}, []float32{1}),
		w.AddF32("t5", []uint64{1, 1, 1, 1, 1}, []float32{1}),
	} {
		if err == nil {
			t.Error("invalid input accepted")
		}
	}
	w.AddF32("t", []uint64{1}, []float32{1})
	if err := w.AddF32("t", []uint64{1}, []float32{1}); err == nil {
		t.Error("duplicate tensor accepted")
	}
}

func TestParseErrors(t *testing.T) {
	good := encode(t, sample(t))
	if _, err := Parse([]byte("GGML....")); !errors.Is(err, ErrNotGGUF) {
		t.Errorf("bad magic: %v", err)
	}
	for n := 0; n < len(good); n += 7 {
		if _, err := Parse(good[:n]); err == nil {
			t.Fatalf("truncated at %d of %d bytes: accepted", n, len(good))
		}
	}
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bad[4:], 9)
	if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("version 9: %v", err)
	}
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(huge[16:], 1<<60)
	if _, err := Parse(huge); err == nil {
		t.Error("absurd metadata count accepted")
	}
}

// FuzzReadGGUF: no input makes Parse panic or allocate without bound, and
// whatever it accepts has tensors inside the file.
func FuzzReadGGUF(f *testing.F) {
	f.Add(encode(f, sample(f)))
	w := NewWriter()
	w.AddKV("general.alignment", uint32(64))
	w.AddF32("x", []uint64{4, 4}, make([]float32, 16))
	f.Add(encode(f, w))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		for i := range file.Tensors {
			tt := &file.Tensors[i]
			if got := uint64(len(file.Data(tt))); got != tt.Size() {
				t.Fatalf("tensor %s: %d bytes, want %d", tt.Name, got, tt.Size())
			}
		}
	})
}
