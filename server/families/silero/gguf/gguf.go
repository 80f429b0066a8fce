// Package gguf reads and writes GGUF v3 files (the ggml model container):
// a header, typed key/value metadata, tensor descriptions and aligned tensor
// data. It covers what the project's converters and families need: all
// scalar and string metadata types, arrays of them, and F32/F16 tensors.
//
// Writing is deterministic: metadata and tensors are written in the order
// they were added, so the same inputs give the same bytes.
package gguf

import (
	"fmt"
)

// Magic is the four bytes that start every GGUF file.
const Magic = "GGUF"

// Version is the GGUF version this package writes (and the newest it reads).
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is a GGUF metadata value type.
type ValueType uint32

// Metadata value types, as numbered by the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// TensorType is a ggml tensor element type.
type TensorType uint32

// Tensor element types this package handles.
const (
	TensorF32 TensorType = 0
	TensorF16 TensorType = 1
)

// ElementSize is the size in bytes of one element of t, or 0 if unsupported.
func (t TensorType) ElementSize() int {
	switch t {
	case TensorF32:
		return 4
	case TensorF16:
		return 2
	}
	return 0
}

func (t TensorType) String() string {
	switch t {
	case TensorF32:
		return "f32"
	case TensorF16:
		return "f16"
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// KV is one metadata entry. Value holds one of: uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a slice of
// one of those ([]string, []int32, ...).
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// fastest-varying (innermost) dimension, the reverse of a row-major
// (PyTorch/ONNX) shape.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64 // relative to the start of the data section
}

// NumElements is the product of the dimensions.
func (t *TensorInfo) NumElements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size is the size of the tensor data in bytes.
func (t *TensorInfo) Size() uint64 {
	return t.NumElements() * uint64(t.Type.ElementSize())
}
