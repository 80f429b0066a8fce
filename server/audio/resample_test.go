package audio

import (
	"math"
	"math/cmplx"
	"testing"
)

func sine(rate int, seconds, freq, amp float64) *Clip {
	n := int(float64(rate) * seconds)
	c := &Clip{SampleRate: rate, Channels: 1, Samples: make([]float32, n)}
	for i := range c.Samples {
		c.Samples[i] = float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return c
}

// rms of the samples between the given fractions of the clip, skipping the
// edges where the filter sees the zero padding.
func rms(s []float32, from, to float64) float64 {
	a, b := int(from*float64(len(s))), int(to*float64(len(s)))
	var sum float64
	for _, v := range s[a:b] {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(b-a))
}

// dftMag is the magnitude of the DFT of s at frequency f, normalised so
// that a full-length sine of amplitude a gives about a/2.
func dftMag(s []float32, rate int, f float64) float64 {
	var acc complex128
	for i, v := range s {
		acc += complex(float64(v), 0) * cmplx.Exp(complex(0, -2*math.Pi*f*float64(i)/float64(rate)))
	}
	return cmplx.Abs(acc) / float64(len(s))
}

// peakFreq finds the strongest frequency on a 1 Hz grid around guess.
func peakFreq(s []float32, rate int, lo, hi float64) float64 {
	best, bestF := -1.0, 0.0
	for f := lo; f <= hi; f += 1 {
		if m := dftMag(s, rate, f); m > best {
			best, bestF = m, f
		}
	}
	return bestF
}

func zeroCrossings(s []float32) int {
	n := 0
	for i := 1; i < len(s); i++ {
		if (s[i-1] < 0) != (s[i] < 0) {
			n++
		}
	}
	return n
}

func TestResamplePreservesSine(t *testing.T) {
	pairs := [][2]int{{8000, 16000}, {44100, 16000}, {48000, 16000}, {22050, 16000}, {16000, 22050}, {16000, 48000}, {11025, 44100}, {44101, 16000}}
	for _, p := range pairs {
		in, out := p[0], p[1]
		const freq = 1000.0
		c := sine(in, 0.5, freq, 0.6)
		r := Resample(c, out)
		if r.SampleRate != out || r.Channels != 1 {
			t.Fatalf("%d→%d: got %d Hz × %d", in, out, r.SampleRate, r.Channels)
		}
		wantLen := (len(c.Samples)*out + in - 1) / in
		if len(r.Samples) != wantLen {
			t.Fatalf("%d→%d: %d frames, want %d", in, out, len(r.Samples), wantLen)
		}
		rin, rout := rms(c.Samples, 0.1, 0.9), rms(r.Samples, 0.1, 0.9)
		if math.Abs(rout/rin-1) > 0.01 {
			t.Errorf("%d→%d: RMS %v → %v (energy not preserved)", in, out, rin, rout)
		}
		if f := peakFreq(r.Samples, out, freq-20, freq+20); math.Abs(f-freq) > 1 {
			t.Errorf("%d→%d: peak at %v Hz, want %v", in, out, f, freq)
		}
		zin, zout := zeroCrossings(c.Samples), zeroCrossings(r.Samples)
		if d := zin - zout; d < -2 || d > 2 {
			t.Errorf("%d→%d: %d zero crossings became %d", in, out, zin, zout)
		}
	}
}

// TestResampleAntiAliasing: a tone above the new Nyquist frequency must be
// removed, not folded back; a tone just below it must survive.
func TestResampleAntiAliasing(t *testing.T) {
	for _, in := range []int{48000, 44100} {
		high := Resample(sine(in, 0.5, 12000, 0.8), 16000) // would alias to 4 kHz
		if m := rms(high.Samples, 0.1, 0.9); m > 0.8/math.Sqrt2*1e-3 {
			t.Errorf("%d→16000: 12 kHz tone leaks with RMS %v (> -60 dB)", in, m)
		}
		if a := dftMag(high.Samples, 16000, 4000); a > 1e-4 {
			t.Errorf("%d→16000: alias at 4 kHz with magnitude %v", in, a)
		}
		// Pass band: flat at 6 kHz, at most 0.2 dB down at 7 kHz.
		for _, tc := range []struct{ freq, minGain float64 }{{6000, 0.995}, {7000, 0.977}} {
			pass := Resample(sine(in, 0.5, tc.freq, 0.8), 16000)
			if r := rms(pass.Samples, 0.1, 0.9) / (0.8 / math.Sqrt2); r < tc.minGain || r > 1.005 {
				t.Errorf("%d→16000: %v Hz tone passes with gain %v, want %v..1.005", in, tc.freq, r, tc.minGain)
			}
		}
	}
}

func TestResampleIdentityAndDeterminism(t *testing.T) {
	c := sine(16000, 0.1, 440, 0.5)
	c.Samples[3] = 0.987654
	same := Resample(c, 16000)
	assertSamples(t, "identity", same.Samples, c.Samples)
	if &same.Samples[0] == &c.Samples[0] {
		t.Fatal("identity resample shares the input's samples")
	}
	a, b := Resample(c, 22050), Resample(c, 22050)
	assertSamples(t, "determinism", a.Samples, b.Samples)
}

func TestResampleRoundTrip(t *testing.T) {
	c := sine(16000, 0.5, 440, 0.5)
	for _, mid := range []int{48000, 44100, 22050} {
		back := Resample(Resample(c, mid), 16000)
		if len(back.Samples) != len(c.Samples) {
			t.Fatalf("via %d: %d samples, want %d", mid, len(back.Samples), len(c.Samples))
		}
		n := len(c.Samples)
		var maxErr float64
		for i := n / 10; i < n*9/10; i++ {
			maxErr = math.Max(maxErr, math.Abs(float64(back.Samples[i]-c.Samples[i])))
		}
		if maxErr > 2e-3 {
			t.Errorf("16000→%d→16000: max error %v", mid, maxErr)
		}
	}
}

func TestResampleMultiChannel(t *testing.T) {
	l, r := sine(44100, 0.3, 500, 0.5), sine(44100, 0.3, 2000, 0.25)
	st := &Clip{SampleRate: 44100, Channels: 2, Samples: make([]float32, 2*len(l.Samples))}
	for i := range l.Samples {
		st.Samples[2*i], st.Samples[2*i+1] = l.Samples[i], r.Samples[i]
	}
	out := Resample(st, 16000)
	ml, mr := Resample(l, 16000), Resample(r, 16000)
	if out.Channels != 2 || out.Frames() != len(ml.Samples) {
		t.Fatalf("stereo: %d ch, %d frames; want 2, %d", out.Channels, out.Frames(), len(ml.Samples))
	}
	for i := range ml.Samples {
		if out.Samples[2*i] != ml.Samples[i] || out.Samples[2*i+1] != mr.Samples[i] {
			t.Fatalf("frame %d: channels mixed up", i)
		}
	}
}

func TestResampleDC(t *testing.T) {
	c := &Clip{SampleRate: 44100, Channels: 1, Samples: make([]float32, 4410)}
	for i := range c.Samples {
		c.Samples[i] = 0.25
	}
	r := Resample(c, 16000)
	for i := 100; i < len(r.Samples)-100; i++ {
		if math.Abs(float64(r.Samples[i])-0.25) > 1e-6 {
			t.Fatalf("DC sample %d = %v, want 0.25", i, r.Samples[i])
		}
	}
}

func TestMono(t *testing.T) {
	c := &Clip{SampleRate: 8000, Channels: 3, Samples: []float32{0.3, 0.6, 0.9, -1, 1, 0, 0.1, 0.1, 0.1, 5}}
	m := Mono(c)
	if m.Channels != 1 || m.SampleRate != 8000 || len(m.Samples) != 3 {
		t.Fatalf("mono: %+v", m)
	}
	want := []float32{0.6, 0, 0.1}
	for i := range want {
		if math.Abs(float64(m.Samples[i]-want[i])) > 1e-7 {
			t.Fatalf("mono sample %d = %v, want %v", i, m.Samples[i], want[i])
		}
	}
	one := &Clip{SampleRate: 8000, Channels: 1, Samples: []float32{0.5, -0.5}}
	cp := Mono(one)
	assertSamples(t, "mono copy", cp.Samples, one.Samples)
	cp.Samples[0] = 0
	if one.Samples[0] != 0.5 {
		t.Fatal("Mono of a mono clip shares the input's samples")
	}
	if Mono(nil) != nil || Resample(nil, 16000) != nil {
		t.Fatal("nil clips must stay nil")
	}
}

func BenchmarkResample48kTo16k(b *testing.B) {
	c := sine(48000, 10, 440, 0.5)
	b.SetBytes(int64(4 * len(c.Samples)))
	for b.Loop() {
		Resample(c, 16000)
	}
}

func BenchmarkResample44kTo16k(b *testing.B) {
	c := sine(44100, 10, 440, 0.5)
	b.SetBytes(int64(4 * len(c.Samples)))
	for b.Loop() {
		Resample(c, 16000)
	}
}

func BenchmarkDecodeWAV(b *testing.B) {
	wav := EncodeWAV(sine(16000, 60, 440, 0.5))
	b.SetBytes(int64(len(wav)))
	for b.Loop() {
		if _, err := DecodeWAV(wav, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
