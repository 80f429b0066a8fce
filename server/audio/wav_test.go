package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
)

// wavSpec describes a WAV file for buildWAV. Tests write their own files
// byte by byte so that every field can be made wrong on purpose.
type wavSpec struct {
	tag        uint16 // format tag in the fmt chunk
	subformat  uint16 // for WAVE_FORMAT_EXTENSIBLE
	validBits  uint16 // for WAVE_FORMAT_EXTENSIBLE; 0 = bits
	channels   int
	rate       int
	bits       int
	blockAlign int // 0 = channels*bits/8
	before     []byte
	between    []byte
	after      []byte
	data       []byte
	dataSize   *uint32 // nil = len(data)
}

func chunk(id string, body []byte) []byte {
	out := append([]byte(id), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(out[4:], uint32(len(body)))
	out = append(out, body...)
	if len(body)%2 == 1 {
		out = append(out, 0)
	}
	return out
}

func buildWAV(s wavSpec) []byte {
	le := binary.LittleEndian
	align := s.blockAlign
	if align == 0 {
		align = s.channels * s.bits / 8
	}
	fmtBody := make([]byte, 16)
	le.PutUint16(fmtBody[0:], s.tag)
	le.PutUint16(fmtBody[2:], uint16(s.channels))
	le.PutUint32(fmtBody[4:], uint32(s.rate))
	le.PutUint32(fmtBody[8:], uint32(s.rate*align))
	le.PutUint16(fmtBody[12:], uint16(align))
	le.PutUint16(fmtBody[14:], uint16(s.bits))
	if s.tag == wavFormatExtensible {
		ext := make([]byte, 24)
		le.PutUint16(ext[0:], 22)
		vb := s.validBits
		if vb == 0 {
			vb = uint16(s.bits)
		}
		le.PutUint16(ext[2:], vb)
		le.PutUint32(ext[4:], 0)
		le.PutUint16(ext[8:], s.subformat)
		copy(ext[10:], subformatSuffix[:])
		fmtBody = append(fmtBody, ext...)
	}
	body := []byte("WAVE")
	body = append(body, s.before...)
	body = append(body, chunk("fmt ", fmtBody)...)
	body = append(body, s.between...)
	dataChunk := chunk("data", s.data)
	if s.dataSize != nil {
		le.PutUint32(dataChunk[4:], *s.dataSize)
	}
	body = append(body, dataChunk...)
	body = append(body, s.after...)
	out := append([]byte("RIFF"), 0, 0, 0, 0)
	le.PutUint32(out[4:], uint32(len(body)))
	return append(out, body...)
}

func le16(vs ...int16) []byte {
	out := make([]byte, 2*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
	}
	return out
}

func mustDecode(t *testing.T, data []byte) *Clip {
	t.Helper()
	c, err := DecodeWAV(data, Limits{})
	if err != nil {
		t.Fatalf("DecodeWAV: %v", err)
	}
	return c
}

// TestDecodeSoxFixtures checks the decoder against files written by sox
// and the float samples sox itself decodes from them (testdata/*.f32).
func TestDecodeSoxFixtures(t *testing.T) {
	cases := []struct {
		name     string
		rate, ch int
		tol      float64
	}{
		{"s16_stereo", 16000, 2, 0},
		{"u8_mono", 8000, 1, 0},
		{"s24_mono", 44100, 1, 0},
		// sox writes 32-bit floats at 24-bit precision (the .f32 files were
		// made with `sox -D x.wav -t f32 x.f32`, no dither), so sources with
		// more precision than that agree to within 2^-23.
		{"s32_3ch_ext", 22050, 3, 1.0 / (1 << 23)},
		{"f32_mono", 48000, 1, 0},
		{"f64_stereo", 48000, 2, 1.0 / (1 << 23)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wav, err := os.ReadFile(filepath.Join("testdata", tc.name+".wav"))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join("testdata", tc.name+".f32"))
			if err != nil {
				t.Fatal(err)
			}
			c := mustDecode(t, wav)
			if c.SampleRate != tc.rate || c.Channels != tc.ch {
				t.Fatalf("got %d Hz × %d channels, want %d × %d", c.SampleRate, c.Channels, tc.rate, tc.ch)
			}
			if len(c.Samples) != len(raw)/4 {
				t.Fatalf("got %d samples, sox decoded %d", len(c.Samples), len(raw)/4)
			}
			var energy float64
			for i, s := range c.Samples {
				want := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
				if d := math.Abs(float64(s - want)); d > tc.tol {
					t.Fatalf("sample %d: got %v, sox says %v", i, s, want)
				}
				energy += float64(s) * float64(s)
			}
			if energy == 0 {
				t.Fatal("fixture decoded to silence")
			}
		})
	}
}

func TestDecodeScaling(t *testing.T) {
	u8 := mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 1, rate: 8000, bits: 8, data: []byte{0, 64, 128, 255}}))
	assertSamples(t, "u8", u8.Samples, []float32{-1, -0.5, 0, 127.0 / 128})

	s16 := mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, data: le16(-32768, 32767, 16384, -1)}))
	assertSamples(t, "s16", s16.Samples, []float32{-1, 32767.0 / 32768, 0.5, -1.0 / 32768})
	if s16.Frames() != 2 || s16.Channels != 2 {
		t.Fatalf("s16: %d frames × %d channels, want 2 × 2", s16.Frames(), s16.Channels)
	}

	s24 := mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 24,
		data: []byte{0x00, 0x00, 0x80, 0xFF, 0xFF, 0x7F, 0x00, 0x00, 0x40, 0xFF, 0xFF, 0xFF}}))
	assertSamples(t, "s24", s24.Samples, []float32{-1, float32(8388607.0 / 8388608), 0.5, float32(-1.0 / 8388608)})

	s32 := mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 32,
		data: []byte{0, 0, 0, 0x80, 0, 0, 0, 0x40, 0, 0, 0, 0xC0, 0xFF, 0xFF, 0xFF, 0x7F}}))
	assertSamples(t, "s32", s32.Samples, []float32{-1, 0.5, -0.5, 1})

	f32 := make([]byte, 8)
	binary.LittleEndian.PutUint32(f32, math.Float32bits(0.25))
	binary.LittleEndian.PutUint32(f32[4:], math.Float32bits(-1.5)) // kept as is: floats may exceed full scale
	assertSamples(t, "f32", mustDecode(t, buildWAV(wavSpec{tag: 3, channels: 1, rate: 16000, bits: 32, data: f32})).Samples, []float32{0.25, -1.5})

	f64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(-0.125))
	binary.LittleEndian.PutUint64(f64[8:], math.Float64bits(0.75))
	assertSamples(t, "f64", mustDecode(t, buildWAV(wavSpec{tag: 3, channels: 2, rate: 16000, bits: 64, data: f64})).Samples, []float32{-0.125, 0.75})

	// Extensible: 24 valid bits left-justified in a 32-bit container, and
	// an extensible float.
	ext := mustDecode(t, buildWAV(wavSpec{tag: wavFormatExtensible, subformat: 1, validBits: 24, channels: 1, rate: 96000, bits: 32,
		data: []byte{0, 0, 0, 0x40, 0, 0, 0, 0x80}}))
	assertSamples(t, "ext s24in32", ext.Samples, []float32{0.5, -1})
	extf := mustDecode(t, buildWAV(wavSpec{tag: wavFormatExtensible, subformat: 3, channels: 1, rate: 16000, bits: 32, data: f32[:4]}))
	assertSamples(t, "ext f32", extf.Samples, []float32{0.25})
}

func assertSamples(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples, want %d", name, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: sample %d = %v, want %v", name, i, got[i], want[i])
		}
	}
}

func TestDecodeSkipsUnknownChunks(t *testing.T) {
	data := le16(100, -100, 200)
	c := mustDecode(t, buildWAV(wavSpec{
		tag: 1, channels: 1, rate: 16000, bits: 16, data: data,
		before:  chunk("JUNK", []byte{1, 2, 3}), // odd size: padded
		between: append(chunk("LIST", []byte("INFOISFT\x05\x00\x00\x00sox!\x00")), chunk("fact", []byte{3, 0, 0, 0})...),
		after:   chunk("id3 ", []byte{9, 9, 9, 9, 9}),
	}))
	assertSamples(t, "chunks", c.Samples, []float32{100.0 / 32768, -100.0 / 32768, 200.0 / 32768})

	// An odd-sized data chunk whose pad byte is missing at the end of file.
	odd := buildWAV(wavSpec{tag: 1, channels: 1, rate: 8000, bits: 8, data: []byte{128, 255, 0}})
	c = mustDecode(t, odd[:len(odd)-1])
	if c.Frames() != 3 {
		t.Fatalf("odd data chunk: %d frames, want 3", c.Frames())
	}
}

func TestDecodeUnknownLengthData(t *testing.T) {
	for _, size := range []uint32{dataSizeUnknownSox, dataSizeUnknownMax} {
		sz := size
		// 5 bytes of 16-bit mono: 2 whole frames and a stray byte.
		wav := buildWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, data: []byte{0, 0x40, 0, 0xC0, 7}, dataSize: &sz})
		wav = wav[:len(wav)-1] // drop the pad byte buildWAV added
		c := mustDecode(t, wav)
		assertSamples(t, "unknown length", c.Samples, []float32{0.5, -0.5})
	}
}

func TestDecodeTrailingPartialFrameDropped(t *testing.T) {
	c := mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, data: append(le16(1, 2, 3, 4), 5, 6)}))
	if c.Frames() != 2 || len(c.Samples) != 4 {
		t.Fatalf("got %d frames / %d samples, want 2 / 4", c.Frames(), len(c.Samples))
	}
}

func TestDecodeErrors(t *testing.T) {
	good := wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, data: le16(1, 2, 3, 4)}
	with := func(f func(*wavSpec)) []byte {
		s := good
		f(&s)
		return buildWAV(s)
	}
	valid := buildWAV(good)
	size := func(n uint32) *uint32 { return &n }
	nan := make([]byte, 4)
	binary.LittleEndian.PutUint32(nan, math.Float32bits(float32(math.NaN())))
	inf64 := make([]byte, 8)
	binary.LittleEndian.PutUint64(inf64, math.Float64bits(1e300))
	badGUID := with(func(s *wavSpec) { s.tag = wavFormatExtensible; s.subformat = 1 })
	badGUID[20+8+24+5] ^= 0xFF // a byte of the GUID suffix
	shortExt := with(func(s *wavSpec) {})
	binary.LittleEndian.PutUint16(shortExt[20:], wavFormatExtensible)
	noData := valid[:36] // RIFF header + fmt chunk only
	binary.LittleEndian.PutUint32(noData[4:], 28)
	dataFirst := append([]byte("RIFF\x00\x00\x00\x00WAVE"), chunk("data", le16(1, 2))...)
	noFmt := append([]byte("RIFF\x00\x00\x00\x00WAVE"), chunk("LIST", []byte("abcd"))...)
	twoFmt := with(func(s *wavSpec) { s.between = valid[12:36] })

	cases := []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "not a WAV file: missing RIFF header"},
		{"text", []byte("hello, this is not audio at all"), "not a WAV file: missing RIFF header"},
		{"short", []byte("RIFF\x04\x00"), "not a WAV file: missing RIFF header"},
		{"rifx", []byte("RIFX\x00\x00\x00\x00WAVE"), `unsupported WAV variant "RIFX"`},
		{"rf64", []byte("RF64\x00\x00\x00\x00WAVE"), `unsupported WAV variant "RF64"`},
		{"avi", []byte("RIFF\x00\x00\x00\x00AVI "), `RIFF form type is "AVI "`},
		{"header only", []byte("RIFF\x04\x00\x00\x00WAVE"), "no fmt chunk"},
		{"stray bytes", append([]byte("RIFF\x04\x00\x00\x00WAVE"), 1, 2, 3), "3 stray bytes"},
		{"no fmt", noFmt, "no fmt chunk"},
		{"data before fmt", dataFirst, "data chunk comes before the fmt chunk"},
		{"no data", noData, "no data chunk"},
		{"two fmt", twoFmt, "more than one fmt chunk"},
		{"truncated fmt", valid[:30], "fmt chunk declares 16 bytes but only 10 remain"},
		{"truncated data", valid[:len(valid)-3], "data chunk declares 8 bytes but only 5 remain"},
		{"truncated other", with(func(s *wavSpec) { s.before = []byte("LIST\xff\x00\x00\x00ab") }), `"LIST" chunk declares 255 bytes`},
		{"short fmt", append([]byte("RIFF\x00\x00\x00\x00WAVE"), chunk("fmt ", make([]byte, 14))...), "fmt chunk is 14 bytes, want at least 16"},
		{"empty data", with(func(s *wavSpec) { s.data = nil }), "WAV has no audio frames"},
		{"less than a frame", with(func(s *wavSpec) { s.channels = 2; s.data = []byte{1, 2, 3} }), "WAV has no audio frames"},
		{"mp3 tag", with(func(s *wavSpec) { s.tag = 0x55 }), "unsupported WAV format tag 0x0055"},
		{"alaw tag", with(func(s *wavSpec) { s.tag = 6; s.bits = 8 }), "unsupported WAV format tag 0x0006"},
		{"12-bit", with(func(s *wavSpec) { s.bits = 12; s.blockAlign = 2 }), "12-bit integer PCM"},
		{"16-bit float", with(func(s *wavSpec) { s.tag = 3 }), "16-bit float"},
		{"0 channels", with(func(s *wavSpec) { s.channels = 0; s.blockAlign = 2 }), "0 channels (supported: 1..16)"},
		{"17 channels", with(func(s *wavSpec) { s.channels = 17 }), "17 channels"},
		{"low rate", with(func(s *wavSpec) { s.rate = 999 }), "sample rate 999 Hz (supported: 1000..384000)"},
		{"high rate", with(func(s *wavSpec) { s.rate = 384001 }), "sample rate 384001 Hz"},
		{"block align", with(func(s *wavSpec) { s.blockAlign = 4 }), "block align is 4, want 2"},
		{"nan", with(func(s *wavSpec) { s.tag = 3; s.bits = 32; s.data = nan }), "float sample 0 is not a finite number"},
		{"huge f64", with(func(s *wavSpec) { s.tag = 3; s.bits = 64; s.data = inf64 }), "not a finite 32-bit number"},
		{"ext short", shortExt, "WAVE_FORMAT_EXTENSIBLE fmt chunk is 16 bytes"},
		{"ext guid", badGUID, "sub-format is not PCM or IEEE float"},
		{"ext subformat", with(func(s *wavSpec) { s.tag = wavFormatExtensible; s.subformat = 2 }), "unsupported WAV format tag 0x0002"},
		{"ext valid bits", with(func(s *wavSpec) { s.tag = wavFormatExtensible; s.subformat = 1; s.validBits = 20 }), "20 valid bits in a 16-bit container"},
		{"size not a placeholder", with(func(s *wavSpec) { s.dataSize = size(0x7FFFFFFF) }), "data chunk declares 2147483647 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeWAV(tc.data, Limits{})
			if err == nil {
				t.Fatalf("decoded %+v, want an error containing %q", c, tc.msg)
			}
			var ae *apierror.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Type != apierror.TypeInvalid {
				t.Fatalf("error %v (%T) is not a 400 invalid_request_error", err, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	wav := buildWAV(wavSpec{tag: 1, channels: 2, rate: 1000, bits: 16, data: make([]byte, 2*2*1500)}) // 1.5 s
	if _, err := DecodeWAV(wav, Limits{MaxSeconds: 1.5}); err != nil {
		t.Fatalf("audio exactly at the limit rejected: %v", err)
	}
	_, err := DecodeWAV(wav, Limits{MaxSeconds: 1.25})
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %v, want a 413", err)
	}
	if !strings.Contains(err.Error(), "1.50 s") || !strings.Contains(err.Error(), "limit of 1.25 s") {
		t.Fatalf("message %q should name the length and the limit", err)
	}
}

func TestEncodeWAV(t *testing.T) {
	c := &Clip{SampleRate: 22050, Channels: 2, Samples: []float32{0, 1, -1, 2, -3, 0.5, -0.5, float32(math.NaN()), 1.0 / 65534}}
	wav := EncodeWAV(c)
	// 9 samples with 2 channels: the odd one out is not a whole frame.
	if len(wav) != 44+16 {
		t.Fatalf("length %d, want %d", len(wav), 44+16)
	}
	le := binary.LittleEndian
	head := []struct {
		off  int
		want uint32
		n    int
	}{{4, 36 + 16, 4}, {16, 16, 4}, {20, 1, 2}, {22, 2, 2}, {24, 22050, 4}, {28, 22050 * 4, 4}, {32, 4, 2}, {34, 16, 2}, {40, 16, 4}}
	for _, h := range head {
		got := uint32(le.Uint16(wav[h.off:]))
		if h.n == 4 {
			got = le.Uint32(wav[h.off:])
		}
		if got != h.want {
			t.Errorf("header field at %d = %d, want %d", h.off, got, h.want)
		}
	}
	if string(wav[0:4]) != "RIFF" || string(wav[8:16]) != "WAVEfmt " || string(wav[36:40]) != "data" {
		t.Fatalf("bad magic: %q", wav[:44])
	}
	want := le16(0, 32767, -32767, 32767, -32767, 16384, -16384, 0)
	if !bytes.Equal(wav[44:], want) {
		t.Fatalf("samples % x, want % x", wav[44:], want)
	}
	if !bytes.Equal(EncodePCM16(c.Samples[:8]), want) {
		t.Fatal("EncodePCM16 differs from the WAV data chunk")
	}
	// Rounding to the nearest step, symmetrically around zero.
	if got := EncodePCM16([]float32{0.51 / 32767, -0.51 / 32767, 0.49 / 32767, 100.51 / 32767}); !bytes.Equal(got, le16(1, -1, 0, 101)) {
		t.Fatalf("rounding: % x", got)
	}

	back := mustDecode(t, wav)
	if back.SampleRate != 22050 || back.Channels != 2 || back.Frames() != 4 {
		t.Fatalf("round trip: %d Hz × %d ch, %d frames", back.SampleRate, back.Channels, back.Frames())
	}
	for i, s := range back.Samples {
		orig := math.Max(-1, math.Min(1, float64(c.Samples[i])))
		if orig != orig {
			orig = 0
		}
		if math.Abs(float64(s)-orig) > 1.0/32767 {
			t.Fatalf("round trip sample %d: %v → %v", i, orig, s)
		}
	}
	// Encoding what was decoded from PCM16 reproduces the bytes except for
	// the single value -32768, which the ±32767 scale cannot express.
	pcm := le16(-32767, -1000, 0, 1, 12345, 32767)
	again := EncodeWAV(mustDecode(t, buildWAV(wavSpec{tag: 1, channels: 1, rate: 8000, bits: 16, data: pcm})))
	if d := maxInt16Diff(again[44:], pcm); d > 1 {
		t.Fatalf("PCM16 → float → PCM16 moved a sample by %d", d)
	}
	if e := EncodeWAV(nil); len(e) != 44 {
		t.Fatalf("EncodeWAV(nil) is %d bytes, want a 44-byte empty file", len(e))
	}
}

func maxInt16Diff(a, b []byte) int {
	m := 0
	for i := 0; i+1 < len(a) && i+1 < len(b); i += 2 {
		d := int(int16(binary.LittleEndian.Uint16(a[i:]))) - int(int16(binary.LittleEndian.Uint16(b[i:])))
		m = max(m, d, -d)
	}
	return m
}
