package vad

import "math"

// Reference is a plain-Go forward pass of the network, one chunk at a time,
// in float64 arithmetic. It is slow and exists as a test oracle for the ggml
// graphs: it follows the ONNX graph operation by operation.
type Reference struct {
	w       *Weights
	h, c    [Hidden]float64
	context [ContextSize]float32
}

// NewReference returns a reference model with zero state.
func NewReference(w *Weights) *Reference { return &Reference{w: w} }

// Reset clears the LSTM state and the sample context.
func (r *Reference) Reset() {
	r.h, r.c = [Hidden]float64{}, [Hidden]float64{}
	r.context = [ContextSize]float32{}
}

// Probabilities runs a whole 16 kHz mono signal from a reset state, chunk by
// chunk (the last chunk zero-padded), and returns one probability per chunk.
func (r *Reference) Probabilities(samples []float32) []float32 {
	r.Reset()
	n := NumChunks(len(samples))
	out := make([]float32, n)
	chunk := make([]float32, ChunkSize)
	for i := 0; i < n; i++ {
		clear(chunk)
		copy(chunk, samples[i*ChunkSize:min(len(samples), (i+1)*ChunkSize)])
		out[i] = r.Step(chunk)
	}
	return out
}

// NumChunks is the number of 512-sample chunks covering n samples.
func NumChunks(n int) int { return (n + ChunkSize - 1) / ChunkSize }

// Step runs one chunk of ChunkSize samples and returns its probability.
func (r *Reference) Step(chunk []float32) float32 {
	w := r.w
	// Context + chunk, then reflection padding on the right.
	var x [WindowSize + PadRight]float64
	for i, v := range r.context {
		x[i] = float64(v)
	}
	for i, v := range chunk[:ChunkSize] {
		x[ContextSize+i] = float64(v)
	}
	for k := 0; k < PadRight; k++ {
		x[WindowSize+k] = x[WindowSize-2-k]
	}
	copy(r.context[:], chunk[ChunkSize-ContextSize:ChunkSize])

	// STFT magnitude: [Bins][Frames].
	feat := make([][]float64, Bins)
	for b := 0; b < Bins; b++ {
		feat[b] = make([]float64, Frames)
		for t := 0; t < Frames; t++ {
			var re, im float64
			for j := 0; j < FilterLen; j++ {
				s := x[t*HopLen+j]
				re += float64(w.Basis[b*FilterLen+j]) * s
				im += float64(w.Basis[(Bins+b)*FilterLen+j]) * s
			}
			feat[b][t] = math.Sqrt(re*re + im*im)
		}
	}
	for _, l := range w.Encoder {
		feat = conv3Relu(l, feat)
	}
	// LSTM cell on the single remaining time step.
	var in [Hidden]float64
	for i := range in {
		in[i] = feat[i][0]
	}
	var gates [4 * Hidden]float64
	for g := range gates {
		s := float64(w.BIH[g]) + float64(w.BHH[g])
		for j := 0; j < Hidden; j++ {
			s += float64(w.WIH[g*Hidden+j])*in[j] + float64(w.WHH[g*Hidden+j])*r.h[j]
		}
		gates[g] = s
	}
	var p float64 = float64(w.DecB)
	for j := 0; j < Hidden; j++ {
		ig := sigmoid(gates[j])
		fg := sigmoid(gates[Hidden+j])
		gg := math.Tanh(gates[2*Hidden+j])
		og := sigmoid(gates[3*Hidden+j])
		r.c[j] = fg*r.c[j] + ig*gg
		r.h[j] = og * math.Tanh(r.c[j])
		p += float64(w.DecW[j]) * math.Max(r.h[j], 0)
	}
	return float32(sigmoid(p))
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// conv3Relu is conv1d(kernel 3, padding 1, stride l.Stride) + ReLU over
// x [In][T], giving [Out][T'].
func conv3Relu(l EncoderLayer, x [][]float64) [][]float64 {
	T := len(x[0])
	OT := (T+2-3)/l.Stride + 1
	out := make([][]float64, l.Out)
	for o := 0; o < l.Out; o++ {
		out[o] = make([]float64, OT)
		for t := 0; t < OT; t++ {
			s := float64(l.B[o])
			for i := 0; i < l.In; i++ {
				for k := 0; k < 3; k++ {
					src := t*l.Stride + k - 1
					if src >= 0 && src < T {
						s += float64(l.W[(o*l.In+i)*3+k]) * x[i][src]
					}
				}
			}
			out[o][t] = math.Max(s, 0)
		}
	}
	return out
}
