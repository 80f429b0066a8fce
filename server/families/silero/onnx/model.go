// Package onnx reads the parts of an ONNX model file (a protocol buffer) that
// a weight converter needs: the graph, its nodes and attributes, and the
// initializer tensors, including those nested in sub-graphs (If branches).
//
// It is a minimal hand-written protobuf wire reader, so the project needs no
// protobuf dependency for one file format it only reads. Unknown fields are
// skipped; sparse initializers, external data and string tensors are not
// supported and are reported as errors when a tensor needs them.
package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// TensorProto data types used by the models this project converts.
const (
	TypeFloat = 1
	TypeInt32 = 6
	TypeInt64 = 7
)

// maxDepth bounds graph nesting (sub-graphs in attributes) so that a
// malicious file cannot exhaust the stack.
const maxDepth = 32

// Model is an ONNX ModelProto.
type Model struct {
	IRVersion int64
	Producer  string
	Opsets    map[string]int64 // domain ("" = ai.onnx) -> version
	Graph     *Graph
}

// Graph is an ONNX GraphProto.
type Graph struct {
	Name         string
	Nodes        []*Node
	Initializers []*Tensor
	Inputs       []string
	Outputs      []string
}

// Node is an ONNX NodeProto.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string
	Outputs []string
	Attrs   []*Attribute
}

// Attr returns the attribute called name, or nil.
func (n *Node) Attr(name string) *Attribute {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Attribute is an ONNX AttributeProto (the kinds this reader decodes).
type Attribute struct {
	Name   string
	Type   int
	F      float32
	I      int64
	S      []byte
	T      *Tensor
	G      *Graph
	Floats []float32
	Ints   []int64
}

// Tensor is an ONNX TensorProto with its data decoded: Floats for float
// tensors, Ints for int32/int64 tensors.
type Tensor struct {
	Name     string
	Dims     []int64
	DataType int
	Floats   []float32
	Ints     []int64
}

// NumElements is the product of the dimensions (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Parse decodes an ONNX model from its serialized bytes.
func Parse(data []byte) (*Model, error) {
	m := &Model{Opsets: map[string]int64{}}
	err := each(data, func(f field) error {
		switch f.num {
		case 1: // ir_version
			if err := wantWire(f, wireVarint, "ir_version"); err != nil {
				return err
			}
			m.IRVersion = int64(f.val)
		case 2: // producer_name
			if err := wantWire(f, wireLen, "producer_name"); err != nil {
				return err
			}
			m.Producer = string(f.data)
		case 7: // graph
			if err := wantWire(f, wireLen, "graph"); err != nil {
				return err
			}
			g, err := parseGraph(f.data, 0)
			if err != nil {
				return fmt.Errorf("graph: %w", err)
			}
			m.Graph = g
		case 8: // opset_import
			if err := wantWire(f, wireLen, "opset_import"); err != nil {
				return err
			}
			var domain string
			var version int64
			if err := each(f.data, func(f field) error {
				switch {
				case f.num == 1 && f.wire == wireLen:
					domain = string(f.data)
				case f.num == 2 && f.wire == wireVarint:
					version = int64(f.val)
				}
				return nil
			}); err != nil {
				return err
			}
			m.Opsets[domain] = version
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.Graph == nil {
		return nil, errors.New("onnx: the model has no graph (is this an ONNX file?)")
	}
	return m, nil
}

func parseGraph(data []byte, depth int) (*Graph, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("onnx: sub-graphs nested deeper than %d", maxDepth)
	}
	g := &Graph{}
	err := each(data, func(f field) error {
		switch f.num {
		case 1: // node
			if err := wantWire(f, wireLen, "node"); err != nil {
				return err
			}
			n, err := parseNode(f.data, depth)
			if err != nil {
				return err
			}
			g.Nodes = append(g.Nodes, n)
		case 2:
			if err := wantWire(f, wireLen, "graph name"); err != nil {
				return err
			}
			g.Name = string(f.data)
		case 5: // initializer
			if err := wantWire(f, wireLen, "initializer"); err != nil {
				return err
			}
			t, err := parseTensor(f.data)
			if err != nil {
				return err
			}
			g.Initializers = append(g.Initializers, t)
		case 11, 12: // input, output (ValueInfoProto: name = 1)
			if err := wantWire(f, wireLen, "value info"); err != nil {
				return err
			}
			var name string
			if err := each(f.data, func(v field) error {
				if v.num == 1 && v.wire == wireLen {
					name = string(v.data)
				}
				return nil
			}); err != nil {
				return err
			}
			if f.num == 11 {
				g.Inputs = append(g.Inputs, name)
			} else {
				g.Outputs = append(g.Outputs, name)
			}
		}
		return nil
	})
	return g, err
}

func parseNode(data []byte, depth int) (*Node, error) {
	n := &Node{}
	err := each(data, func(f field) error {
		if f.num >= 1 && f.num <= 7 && f.num != 5 && f.num != 6 {
			if err := wantWire(f, wireLen, "node string"); err != nil {
				return err
			}
		}
		switch f.num {
		case 1:
			n.Inputs = append(n.Inputs, string(f.data))
		case 2:
			n.Outputs = append(n.Outputs, string(f.data))
		case 3:
			n.Name = string(f.data)
		case 4:
			n.OpType = string(f.data)
		case 7:
			n.Domain = string(f.data)
		case 5:
			if err := wantWire(f, wireLen, "attribute"); err != nil {
				return err
			}
			a, err := parseAttribute(f.data, depth)
			if err != nil {
				return fmt.Errorf("node %q attribute: %w", n.Name, err)
			}
			n.Attrs = append(n.Attrs, a)
		}
		return nil
	})
	return n, err
}

func parseAttribute(data []byte, depth int) (*Attribute, error) {
	a := &Attribute{}
	err := each(data, func(f field) error {
		var err error
		switch f.num {
		case 1:
			if err = wantWire(f, wireLen, "attribute name"); err == nil {
				a.Name = string(f.data)
			}
		case 2:
			if err = wantWire(f, wireI32, "attribute f"); err == nil {
				a.F = math.Float32frombits(uint32(f.val))
			}
		case 3:
			if err = wantWire(f, wireVarint, "attribute i"); err == nil {
				a.I = int64(f.val)
			}
		case 4:
			if err = wantWire(f, wireLen, "attribute s"); err == nil {
				a.S = f.data
			}
		case 5:
			if err = wantWire(f, wireLen, "attribute t"); err == nil {
				a.T, err = parseTensor(f.data)
			}
		case 6:
			if err = wantWire(f, wireLen, "attribute g"); err == nil {
				a.G, err = parseGraph(f.data, depth+1)
			}
		case 7:
			a.Floats, err = float32s(a.Floats, f)
		case 8:
			a.Ints, err = int64s(a.Ints, f)
		case 20:
			if err = wantWire(f, wireVarint, "attribute type"); err == nil {
				a.Type = int(f.val)
			}
		}
		return err
	})
	return a, err
}

func parseTensor(data []byte) (*Tensor, error) {
	t := &Tensor{}
	var raw []byte
	hasRaw := false
	var external bool
	err := each(data, func(f field) error {
		var err error
		switch f.num {
		case 1:
			t.Dims, err = int64s(t.Dims, f)
		case 2:
			if err = wantWire(f, wireVarint, "data_type"); err == nil {
				t.DataType = int(f.val)
			}
		case 4:
			t.Floats, err = float32s(t.Floats, f)
		case 5, 7:
			t.Ints, err = int64s(t.Ints, f)
		case 8:
			if err = wantWire(f, wireLen, "tensor name"); err == nil {
				t.Name = string(f.data)
			}
		case 9:
			if err = wantWire(f, wireLen, "raw_data"); err == nil {
				raw, hasRaw = f.data, true
			}
		case 14:
			external = f.wire == wireVarint && f.val == 1
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	for _, d := range t.Dims {
		if d < 0 {
			return nil, fmt.Errorf("onnx: tensor %q has a negative dimension %d", t.Name, d)
		}
	}
	if external {
		return nil, fmt.Errorf("onnx: tensor %q keeps its data in an external file, which this reader does not support", t.Name)
	}
	n := int64(1)
	for _, d := range t.Dims {
		if d != 0 && n > math.MaxInt32/d {
			return nil, fmt.Errorf("onnx: tensor %q is too large (%v)", t.Name, t.Dims)
		}
		n *= d
	}
	if hasRaw {
		switch t.DataType {
		case TypeFloat:
			if int64(len(raw)) != 4*n {
				return nil, fmt.Errorf("onnx: tensor %q: %d bytes of raw data for %d floats", t.Name, len(raw), n)
			}
			t.Floats = make([]float32, n)
			for i := range t.Floats {
				t.Floats[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case TypeInt64:
			if int64(len(raw)) != 8*n {
				return nil, fmt.Errorf("onnx: tensor %q: %d bytes of raw data for %d int64s", t.Name, len(raw), n)
			}
			t.Ints = make([]int64, n)
			for i := range t.Ints {
				t.Ints[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		case TypeInt32:
			if int64(len(raw)) != 4*n {
				return nil, fmt.Errorf("onnx: tensor %q: %d bytes of raw data for %d int32s", t.Name, len(raw), n)
			}
			t.Ints = make([]int64, n)
			for i := range t.Ints {
				t.Ints[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
			}
		default:
			// Other types are kept undecoded; converters reject them by type.
		}
		return t, nil
	}
	switch t.DataType {
	case TypeFloat:
		if int64(len(t.Floats)) != n {
			return nil, fmt.Errorf("onnx: tensor %q: %d floats for shape %v", t.Name, len(t.Floats), t.Dims)
		}
	case TypeInt32, TypeInt64:
		if int64(len(t.Ints)) != n {
			return nil, fmt.Errorf("onnx: tensor %q: %d integers for shape %v", t.Name, len(t.Ints), t.Dims)
		}
	}
	return t, nil
}
