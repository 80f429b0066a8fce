// Package onnxtest writes small ONNX models (protobuf) for tests of the
// ONNX reader and the converters, so they run without downloaded weights.
package onnxtest

import (
	"encoding/binary"
	"math"
)

// Msg is a protobuf message under construction.
type Msg []byte

func (m Msg) key(num, wire int) Msg { return binary.AppendUvarint(m, uint64(num<<3|wire)) }

// Varint appends a varint field.
func (m Msg) Varint(num int, v uint64) Msg { return binary.AppendUvarint(m.key(num, 0), v) }

// Bytes appends a length-delimited field.
func (m Msg) Bytes(num int, b []byte) Msg {
	return append(binary.AppendUvarint(m.key(num, 2), uint64(len(b))), b...)
}

// String appends a string field.
func (m Msg) String(num int, s string) Msg { return m.Bytes(num, []byte(s)) }

// Fixed32 appends a fixed32 field.
func (m Msg) Fixed32(num int, v uint32) Msg {
	return binary.LittleEndian.AppendUint32(m.key(num, 5), v)
}

// Tensor is a float32 TensorProto. With raw true the data goes in raw_data,
// else in packed float_data.
func Tensor(name string, dims []int64, data []float32, raw bool) Msg {
	var m Msg
	var packed []byte
	for _, d := range dims {
		packed = binary.AppendUvarint(packed, uint64(d))
	}
	m = m.Bytes(1, packed).Varint(2, 1)
	var buf []byte
	for _, v := range data {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	if raw {
		m = m.Bytes(9, buf)
	} else {
		m = m.Bytes(4, buf)
	}
	return m.String(8, name)
}

// Int64Tensor is an int64 TensorProto (raw_data).
func Int64Tensor(name string, dims []int64, data []int64) Msg {
	var m Msg
	for _, d := range dims {
		m = m.Varint(1, uint64(d)) // unpacked dims
	}
	m = m.Varint(2, 7)
	var buf []byte
	for _, v := range data {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
	}
	return m.Bytes(9, buf).String(8, name)
}

// Constant is a Constant node producing tensor t as output.
func Constant(output string, t Msg) Msg {
	attr := Msg(nil).String(1, "value").Bytes(5, t).Varint(20, 4)
	return Msg(nil).String(2, output).String(4, "Constant").Bytes(5, attr)
}

// Node is a node with inputs, outputs and graph attributes (name -> graph).
func Node(op string, inputs, outputs []string, graphs map[string]Msg) Msg {
	var m Msg
	for _, in := range inputs {
		m = m.String(1, in)
	}
	for _, out := range outputs {
		m = m.String(2, out)
	}
	m = m.String(3, op+"_0").String(4, op)
	for _, name := range []string{"then_branch", "else_branch"} {
		if g, ok := graphs[name]; ok {
			m = m.Bytes(5, Msg(nil).String(1, name).Bytes(6, g).Varint(20, 5))
		}
	}
	return m
}

// Graph is a GraphProto with nodes, initializers, inputs and outputs.
func Graph(name string, nodes, inits []Msg, inputs, outputs []string) Msg {
	var m Msg
	for _, n := range nodes {
		m = m.Bytes(1, n)
	}
	m = m.String(2, name)
	for _, t := range inits {
		m = m.Bytes(5, t)
	}
	for _, in := range inputs {
		m = m.Bytes(11, Msg(nil).String(1, in))
	}
	for _, out := range outputs {
		m = m.Bytes(12, Msg(nil).String(1, out))
	}
	return m
}

// Model is a ModelProto around graph (IR version 8, opset 16).
func Model(graph Msg) []byte {
	return Msg(nil).Varint(1, 8).String(2, "onnxtest").Bytes(7, graph).
		Bytes(8, Msg(nil).String(1, "").Varint(2, 16))
}
