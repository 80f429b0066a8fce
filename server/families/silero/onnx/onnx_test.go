package onnx

import (
	"reflect"
	"testing"

	"github.com/audioproof/audioproof/server/families/silero/onnx/onnxtest"
)

func testModel() []byte {
	then := onnxtest.Graph("then", []onnxtest.Msg{
		onnxtest.Constant("w", onnxtest.Tensor("w", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}, true)),
	}, []onnxtest.Msg{onnxtest.Tensor("b", []int64{2}, []float32{-1, 0.5}, false)}, nil, []string{"w"})
	els := onnxtest.Graph("else", []onnxtest.Msg{
		onnxtest.Constant("k", onnxtest.Int64Tensor("k", nil, []int64{16000})),
	}, nil, nil, []string{"k"})
	top := onnxtest.Graph("main", []onnxtest.Msg{
		onnxtest.Node("If", []string{"cond"}, []string{"out"}, map[string]onnxtest.Msg{"then_branch": then, "else_branch": els}),
	}, nil, []string{"input", "sr"}, []string{"out"})
	return onnxtest.Model(top)
}

func TestParse(t *testing.T) {
	m, err := Parse(testModel())
	if err != nil {
		t.Fatal(err)
	}
	if m.IRVersion != 8 || m.Producer != "onnxtest" || m.Opsets[""] != 16 {
		t.Errorf("header: %+v", m)
	}
	g := m.Graph
	if g.Name != "main" || !reflect.DeepEqual(g.Inputs, []string{"input", "sr"}) || !reflect.DeepEqual(g.Outputs, []string{"out"}) {
		t.Errorf("graph: %+v", g)
	}
	if len(g.Nodes) != 1 || g.Nodes[0].OpType != "If" || g.Nodes[0].Inputs[0] != "cond" {
		t.Fatalf("nodes: %+v", g.Nodes)
	}
	then := g.Nodes[0].Attr("then_branch")
	if then == nil || then.G == nil {
		t.Fatal("no then_branch graph")
	}
	c := then.G.Nodes[0].Attr("value").T
	if c.Name != "w" || !reflect.DeepEqual(c.Dims, []int64{2, 3}) || !reflect.DeepEqual(c.Floats, []float32{1, 2, 3, 4, 5, 6}) || c.NumElements() != 6 {
		t.Errorf("raw float tensor: %+v", c)
	}
	b := then.G.Initializers[0]
	if !reflect.DeepEqual(b.Floats, []float32{-1, 0.5}) {
		t.Errorf("float_data tensor: %+v", b)
	}
	k := g.Nodes[0].Attr("else_branch").G.Nodes[0].Attr("value").T
	if k.DataType != TypeInt64 || !reflect.DeepEqual(k.Ints, []int64{16000}) || len(k.Dims) != 0 {
		t.Errorf("int64 scalar: %+v", k)
	}
}

func TestParseErrors(t *testing.T) {
	good := testModel()
	for n := 1; n < len(good); n++ {
		if _, err := Parse(good[:n]); err == nil {
			// A prefix can be a valid message only if it ends on a field
			// boundary of the top level and still holds the graph.
			m, _ := Parse(good[:n])
			if m == nil || m.Graph == nil {
				t.Fatalf("prefix of %d bytes accepted without a graph", n)
			}
		}
	}
	if _, err := Parse([]byte{}); err == nil {
		t.Error("empty input accepted")
	}
	// A tensor whose data does not match its shape.
	bad := onnxtest.Model(onnxtest.Graph("g", nil, []onnxtest.Msg{onnxtest.Tensor("t", []int64{3}, []float32{1}, true)}, nil, nil))
	if _, err := Parse(bad); err == nil {
		t.Error("short raw data accepted")
	}
	// Deeply nested sub-graphs are refused, not recursed into forever.
	g := onnxtest.Graph("leaf", nil, nil, nil, nil)
	for i := 0; i < 40; i++ {
		g = onnxtest.Graph("g", []onnxtest.Msg{onnxtest.Node("If", nil, nil, map[string]onnxtest.Msg{"then_branch": g})}, nil, nil, nil)
	}
	if _, err := Parse(onnxtest.Model(g)); err == nil {
		t.Error("40 nested graphs accepted")
	}
}

// FuzzParseONNX: no input makes the protobuf reader panic, and decoded
// tensors always hold as many values as their shape says.
func FuzzParseONNX(f *testing.F) {
	f.Add(testModel())
	f.Add([]byte{0x3a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		var check func(g *Graph)
		check = func(g *Graph) {
			for _, tt := range g.Initializers {
				if tt.DataType == TypeFloat && int64(len(tt.Floats)) != tt.NumElements() {
					t.Fatalf("tensor %q: %d floats for %v", tt.Name, len(tt.Floats), tt.Dims)
				}
			}
			for _, n := range g.Nodes {
				for _, a := range n.Attrs {
					if a.G != nil {
						check(a.G)
					}
				}
			}
		}
		check(m.Graph)
	})
}
