package audio

import (
	"encoding/binary"
	"math"

	"github.com/audioproof/audioproof/server/apierror"
)

// Limits bounds what DecodeWAV accepts.
type Limits struct {
	// MaxSeconds is the longest audio accepted; 0 or less means no limit.
	MaxSeconds float64
}

// Bounds of the formats DecodeWAV accepts (the wire contract's ranges).
const (
	MinSampleRate = 1000
	MaxSampleRate = 384000
	MaxChannels   = 16
)

// WAV format tags.
const (
	wavFormatPCM        = 0x0001
	wavFormatFloat      = 0x0003
	wavFormatExtensible = 0xFFFE
)

// Declared data sizes that mean "length unknown". Writers that stream to a
// pipe cannot seek back to patch the header: sox and `espeak-ng --stdout`
// write 0x7FFFF000, others 0xFFFFFFFF. For these exact values (and only for
// them) DecodeWAV takes the rest of the file as audio, rounded down to whole
// frames. Any other data size larger than what the file holds is a truncated
// file and an error.
const (
	dataSizeUnknownSox = 0x7FFFF000
	dataSizeUnknownMax = 0xFFFFFFFF
)

// The GUID suffix shared by KSDATAFORMAT_SUBTYPE_PCM and _IEEE_FLOAT
// (00000001-0000-0010-8000-00aa00389b71, bytes 2..15 as stored).
var subformatSuffix = [14]byte{0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71}

// wavFormat is the decoded fmt chunk.
type wavFormat struct {
	float      bool
	channels   int
	rate       int
	bits       int // container bits per sample
	blockAlign int
}

// DecodeWAV reads a RIFF/WAVE file held in data.
//
// Accepted: integer PCM with 8 (unsigned), 16, 24 or 32 bits, IEEE float
// with 32 or 64 bits, plain or WAVE_FORMAT_EXTENSIBLE (sub-format PCM or
// float), 1..16 channels, 1000..384000 Hz. Unknown chunks are skipped
// (honouring the pad byte after odd-sized chunks). Integer samples are scaled
// by 1/2^(bits-1) (8-bit: (v-128)/128), so full scale maps to [-1, 1)
// (32-bit values near the top round to exactly 1 in float32).
// Float samples are taken as they are and must be finite. A trailing partial
// frame is dropped. The RIFF size field is not trusted (streaming writers
// leave it wrong); chunks are read in order until the data chunk, and what
// follows it is ignored. See dataSizeUnknownSox for the one case where a
// data chunk may claim more bytes than the file holds.
//
// Every error is an apierror with status 400 (malformed input) or 413 (audio
// longer than limits.MaxSeconds).
func DecodeWAV(data []byte, limits Limits) (*Clip, error) {
	if len(data) < 12 || string(data[0:4]) != "RIFF" {
		if len(data) >= 4 && (string(data[0:4]) == "RIFX" || string(data[0:4]) == "RF64") {
			return nil, apierror.Invalidf("unsupported WAV variant %q: send a little-endian RIFF WAV (PCM or float)", data[0:4])
		}
		return nil, apierror.Invalidf("not a WAV file: missing RIFF header")
	}
	if string(data[8:12]) != "WAVE" {
		return nil, apierror.Invalidf("not a WAV file: RIFF form type is %q, want \"WAVE\"", printable(data[8:12]))
	}
	var (
		format  *wavFormat
		pcm     []byte
		hasData bool
	)
	pos := 12
	for pos < len(data) && !hasData {
		if len(data)-pos < 8 {
			// A few stray bytes after the last chunk are tolerated only
			// once the data chunk has been seen, which ends the loop.
			return nil, apierror.Invalidf("WAV truncated: %d stray bytes where a chunk header was expected at offset %d", len(data)-pos, pos)
		}
		id := string(data[pos : pos+4])
		size := binary.LittleEndian.Uint32(data[pos+4 : pos+8])
		body := pos + 8
		remain := uint64(len(data) - body)
		switch id {
		case "fmt ":
			if format != nil {
				return nil, apierror.Invalidf("invalid WAV: more than one fmt chunk")
			}
			if uint64(size) > remain {
				return nil, apierror.Invalidf("WAV truncated: fmt chunk declares %d bytes but only %d remain", size, remain)
			}
			f, err := parseFmt(data[body : body+int(size)])
			if err != nil {
				return nil, err
			}
			format = f
		case "data":
			if format == nil {
				return nil, apierror.Invalidf("invalid WAV: data chunk comes before the fmt chunk")
			}
			n := uint64(size)
			if n > remain {
				if size != dataSizeUnknownSox && size != dataSizeUnknownMax {
					return nil, apierror.Invalidf("WAV truncated: data chunk declares %d bytes but only %d remain", size, remain)
				}
				n = remain
			}
			pcm = data[body : body+int(n)]
			hasData = true
		default:
			if uint64(size) > remain {
				return nil, apierror.Invalidf("WAV truncated: %q chunk declares %d bytes but only %d remain", printable([]byte(id)), size, remain)
			}
		}
		next := uint64(body) + uint64(size) + uint64(size&1)
		if next > uint64(len(data)) {
			next = uint64(len(data)) // missing pad byte at the very end
		}
		pos = int(next)
	}
	if format == nil {
		return nil, apierror.Invalidf("invalid WAV: no fmt chunk")
	}
	if !hasData {
		return nil, apierror.Invalidf("invalid WAV: no data chunk")
	}
	frames := len(pcm) / format.blockAlign
	if frames == 0 {
		return nil, apierror.Invalidf("WAV has no audio frames")
	}
	if limits.MaxSeconds > 0 {
		seconds := float64(frames) / float64(format.rate)
		if seconds > limits.MaxSeconds {
			return nil, apierror.TooLargef("audio is %.2f s long, over the limit of %g s", seconds, limits.MaxSeconds)
		}
	}
	samples, err := decodeSamples(pcm[:frames*format.blockAlign], format)
	if err != nil {
		return nil, err
	}
	return &Clip{SampleRate: format.rate, Channels: format.channels, Samples: samples}, nil
}

// parseFmt checks a fmt chunk body and returns the format it describes.
func parseFmt(b []byte) (*wavFormat, error) {
	if len(b) < 16 {
		return nil, apierror.Invalidf("invalid WAV: fmt chunk is %d bytes, want at least 16", len(b))
	}
	tag := binary.LittleEndian.Uint16(b[0:2])
	f := &wavFormat{
		channels:   int(binary.LittleEndian.Uint16(b[2:4])),
		rate:       int(binary.LittleEndian.Uint32(b[4:8])),
		blockAlign: int(binary.LittleEndian.Uint16(b[12:14])),
		bits:       int(binary.LittleEndian.Uint16(b[14:16])),
	}
	validBits := f.bits
	if tag == wavFormatExtensible {
		if len(b) < 40 {
			return nil, apierror.Invalidf("invalid WAV: WAVE_FORMAT_EXTENSIBLE fmt chunk is %d bytes, want 40", len(b))
		}
		if cb := binary.LittleEndian.Uint16(b[16:18]); cb < 22 {
			return nil, apierror.Invalidf("invalid WAV: WAVE_FORMAT_EXTENSIBLE extension is %d bytes, want 22", cb)
		}
		validBits = int(binary.LittleEndian.Uint16(b[18:20]))
		if [14]byte(b[26:40]) != subformatSuffix {
			return nil, apierror.Invalidf("unsupported WAV: WAVE_FORMAT_EXTENSIBLE sub-format is not PCM or IEEE float")
		}
		tag = binary.LittleEndian.Uint16(b[24:26])
		if validBits == 0 {
			validBits = f.bits
		}
	}
	switch tag {
	case wavFormatPCM:
		if f.bits != 8 && f.bits != 16 && f.bits != 24 && f.bits != 32 {
			return nil, apierror.Invalidf("unsupported WAV: %d-bit integer PCM (supported: 8, 16, 24, 32)", f.bits)
		}
	case wavFormatFloat:
		if f.bits != 32 && f.bits != 64 {
			return nil, apierror.Invalidf("unsupported WAV: %d-bit float (supported: 32, 64)", f.bits)
		}
		f.float = true
	default:
		return nil, apierror.Invalidf("unsupported WAV format tag 0x%04X: send PCM (1), IEEE float (3) or WAVE_FORMAT_EXTENSIBLE", tag)
	}
	if validBits > f.bits {
		return nil, apierror.Invalidf("invalid WAV: %d valid bits in a %d-bit container", validBits, f.bits)
	}
	if f.channels < 1 || f.channels > MaxChannels {
		return nil, apierror.Invalidf("unsupported WAV: %d channels (supported: 1..%d)", f.channels, MaxChannels)
	}
	if f.rate < MinSampleRate || f.rate > MaxSampleRate {
		return nil, apierror.Invalidf("unsupported WAV: sample rate %d Hz (supported: %d..%d)", f.rate, MinSampleRate, MaxSampleRate)
	}
	if want := f.channels * f.bits / 8; f.blockAlign != want {
		return nil, apierror.Invalidf("invalid WAV: block align is %d, want %d for %d channels of %d bits", f.blockAlign, want, f.channels, f.bits)
	}
	return f, nil
}

// decodeSamples converts whole frames of little-endian samples to float32.
func decodeSamples(pcm []byte, f *wavFormat) ([]float32, error) {
	width := f.bits / 8
	out := make([]float32, len(pcm)/width)
	switch {
	case f.float && width == 4:
		for i := range out {
			v := math.Float32frombits(binary.LittleEndian.Uint32(pcm[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, apierror.Invalidf("invalid WAV: float sample %d is not a finite number", i)
			}
			out[i] = v
		}
	case f.float:
		for i := range out {
			v := math.Float64frombits(binary.LittleEndian.Uint64(pcm[8*i:]))
			if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
				return nil, apierror.Invalidf("invalid WAV: float sample %d is not a finite 32-bit number", i)
			}
			out[i] = float32(v)
		}
	case width == 1:
		for i := range out {
			out[i] = float32(int(pcm[i])-128) / 128
		}
	case width == 2:
		for i := range out {
			out[i] = float32(int16(binary.LittleEndian.Uint16(pcm[2*i:]))) / 32768
		}
	case width == 3:
		for i := range out {
			b := pcm[3*i:]
			v := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			out[i] = float32(float64(v) / (1 << 23))
		}
	default:
		for i := range out {
			v := int32(binary.LittleEndian.Uint32(pcm[4*i:]))
			out[i] = float32(float64(v) / (1 << 31))
		}
	}
	return out, nil
}

// printable replaces bytes outside printable ASCII so that error messages
// stay readable whatever the input holds.
func printable(b []byte) string {
	r := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7E {
			c = '?'
		}
		r[i] = c
	}
	return string(r)
}

// pcm16 converts one sample the wire contract's way: clip to ±1, ×32767,
// round half away from zero. NaN becomes 0.
func pcm16(s float32) int16 {
	v := float64(s)
	switch {
	case v != v:
		return 0
	case v > 1:
		v = 1
	case v < -1:
		v = -1
	}
	return int16(math.Round(v * 32767))
}

// EncodePCM16 returns samples as headerless little-endian 16-bit PCM, each
// clipped to ±1, multiplied by 32767 and rounded.
func EncodePCM16(samples []float32) []byte {
	out := make([]byte, 2*len(samples))
	for i, s := range samples {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(pcm16(s)))
	}
	return out
}

// EncodeWAV returns c as a canonical 44-byte-header RIFF WAV with 16-bit PCM
// samples (see EncodePCM16). A nil clip or one with no channels encodes as an
// empty mono file at c's rate.
func EncodeWAV(c *Clip) []byte {
	channels, rate := 1, 0
	var samples []float32
	if c != nil {
		rate = c.SampleRate
		if c.Channels > 0 {
			channels = c.Channels
			samples = c.Samples[:c.Frames()*c.Channels]
		}
	}
	dataLen := 2 * len(samples)
	out := make([]byte, 44, 44+dataLen)
	le := binary.LittleEndian
	copy(out[0:], "RIFF")
	le.PutUint32(out[4:], uint32(36+dataLen))
	copy(out[8:], "WAVEfmt ")
	le.PutUint32(out[16:], 16)
	le.PutUint16(out[20:], wavFormatPCM)
	le.PutUint16(out[22:], uint16(channels))
	le.PutUint32(out[24:], uint32(rate))
	le.PutUint32(out[28:], uint32(rate*channels*2))
	le.PutUint16(out[32:], uint16(channels*2))
	le.PutUint16(out[34:], 16)
	copy(out[36:], "data")
	le.PutUint32(out[40:], uint32(dataLen))
	return append(out, EncodePCM16(samples)...)
}
