package silero

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/families/silero/vad"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/session"
)

// Session runs requests one at a time with private state: its own compute
// stream on the assets' device, LSTM state and graphs.
type Session struct {
	assets  *Assets
	backend *ggml.Backend // forked stream
	state   *ggml.Context
	buf     *ggml.Buffer
	h, c    *ggml.Tensor
	blocks  map[int]*block
	scratch []float32
	closed  bool
}

func newSession(a *Assets) (*Session, error) {
	be, err := a.backend.Fork()
	if err != nil {
		return nil, err
	}
	ctx, err := be.Library().NewContextWith(ggml.ContextOptions{Tensors: 4})
	if err != nil {
		be.Close()
		return nil, err
	}
	s := &Session{assets: a, backend: be, state: ctx, blocks: map[int]*block{}}
	s.h = ctx.NewTensor1D(ggml.TypeF32, vad.Hidden).SetName("lstm.h")
	s.c = ctx.NewTensor1D(ggml.TypeF32, vad.Hidden).SetName("lstm.c")
	if s.buf, err = ctx.Alloc(be); err != nil {
		ctx.Close()
		be.Close()
		return nil, err
	}
	return s, nil
}

// Close frees the session's graphs, state and stream (idempotent).
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, b := range s.blocks {
		errs = append(errs, b.close())
	}
	s.blocks = nil
	errs = append(errs, s.buf.Close(), s.state.Close(), s.backend.Close())
	s.assets.sessionClosed()
	return errors.Join(errs...)
}

// returnProbabilities reads the return_probabilities option (request over
// session options).
func returnProbabilities(sessionOpts, reqOpts map[string]string) (bool, error) {
	v, ok := reqOpts["return_probabilities"]
	if !ok {
		v, ok = sessionOpts["return_probabilities"]
	}
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, &vad.OptionError{Name: "return_probabilities", Value: v, Want: "true or false"}
	}
	return b, nil
}

// Run detects speech in req.Audio.
func (s *Session) Run(ctx context.Context, req *session.Request, _ session.Sink) (*session.Result, error) {
	if s.closed {
		return nil, errors.New("silero_vad: session is closed")
	}
	clip := req.Audio
	if clip == nil || clip.Frames() == 0 || clip.SampleRate <= 0 {
		return nil, apierror.Invalidf("silero_vad: the request has no audio (or it is empty); send a WAV file with at least one sample")
	}
	opts, err := vad.ParseOptions(s.assets.sessionOptions, req.Options)
	if err != nil {
		return nil, apierror.Invalidf("silero_vad: %v", err)
	}
	withProbs, err := returnProbabilities(s.assets.sessionOptions, req.Options)
	if err != nil {
		return nil, apierror.Invalidf("silero_vad: %v", err)
	}
	mono := audio.Mono(clip)
	if mono.SampleRate != vad.SampleRate {
		mono = audio.Resample(mono, vad.SampleRate)
	}
	probs, err := s.Probabilities(ctx, mono.Samples)
	if err != nil {
		return nil, err
	}
	spans := vad.SpeechTimestamps(probs, len(mono.Samples), opts)
	segs := vad.ToInputRate(spans, probs, clip.SampleRate, int64(clip.Frames()))
	res := &session.Result{SampleRate: clip.SampleRate, Segments: make([]session.Segment, len(segs))}
	for i, sg := range segs {
		res.Segments[i] = session.Segment{StartSample: sg.StartSample, EndSample: sg.EndSample, Confidence: sg.Confidence}
	}
	if withProbs {
		res.Extra = map[string]any{"probabilities": probs}
	}
	return res, nil
}

// Probabilities runs the network over a 16 kHz mono signal from a zero state
// and returns one speech probability per 512-sample chunk.
func (s *Session) Probabilities(ctx context.Context, samples []float32) ([]float32, error) {
	if s.closed {
		return nil, errors.New("silero_vad: session is closed")
	}
	total := vad.NumChunks(len(samples))
	if total == 0 {
		return nil, nil
	}
	if err := s.h.Zero(); err != nil {
		return nil, err
	}
	if err := s.c.Zero(); err != nil {
		return nil, err
	}
	out := make([]float32, 0, total)
	for done := 0; done < total; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := blockSize(total - done)
		b, err := s.block(n)
		if err != nil {
			return nil, err
		}
		if cap(s.scratch) < n*padded {
			s.scratch = make([]float32, n*padded)
		}
		win := s.scratch[:n*padded]
		fillWindows(win, samples, done, n)
		if err := b.in.SetF32(win); err != nil {
			return nil, err
		}
		if err := s.backend.Compute(b.graph); err != nil {
			return nil, fmt.Errorf("silero_vad: %w", err)
		}
		p, err := b.probs.F32()
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
		done += n
	}
	return out, nil
}

// blockSize is the largest power of two <= min(remaining, maxBlock).
func blockSize(remaining int) int {
	n := min(remaining, maxBlock)
	return 1 << (bits.Len(uint(n)) - 1)
}

func (s *Session) block(n int) (*block, error) {
	if b, ok := s.blocks[n]; ok {
		return b, nil
	}
	b, err := buildBlock(s.backend, s.assets.model, s.h, s.c, n)
	if err != nil {
		return nil, fmt.Errorf("silero_vad: building the graph for %d chunks: %w", n, err)
	}
	s.blocks[n] = b
	return b, nil
}
