package audio

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
)

// FuzzDecodeWAV checks that no input makes DecodeWAV panic, that every
// error is an API error, and that every clip it returns agrees with the
// header it came from. Run it with
//
//	go test ./server/audio -run '^$' -fuzz FuzzDecodeWAV -fuzztime 60s -fuzzminimizetime 5s
//
// (new inputs are minimised for up to a minute by default, which shows as
// long pauses with 0 execs/sec).
func FuzzDecodeWAV(f *testing.F) {
	fixtures, _ := filepath.Glob(filepath.Join("testdata", "*.wav"))
	for _, p := range fixtures {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	sz := uint32(dataSizeUnknownSox)
	seeds := [][]byte{
		buildWAV(wavSpec{tag: 1, channels: 1, rate: 8000, bits: 8, data: []byte{1, 2, 3}}),
		buildWAV(wavSpec{tag: 1, channels: 2, rate: 16000, bits: 16, data: le16(1, -2, 3, -4)}),
		buildWAV(wavSpec{tag: 1, channels: 1, rate: 44100, bits: 24, data: make([]byte, 9)}),
		buildWAV(wavSpec{tag: 1, channels: 1, rate: 44100, bits: 32, data: make([]byte, 8), before: chunk("JUNK", []byte{1})}),
		buildWAV(wavSpec{tag: 3, channels: 1, rate: 48000, bits: 32, data: make([]byte, 8)}),
		buildWAV(wavSpec{tag: 3, channels: 2, rate: 48000, bits: 64, data: make([]byte, 32)}),
		buildWAV(wavSpec{tag: wavFormatExtensible, subformat: 1, validBits: 20, channels: 3, rate: 96000, bits: 24, data: make([]byte, 18)}),
		buildWAV(wavSpec{tag: wavFormatExtensible, subformat: 3, channels: 1, rate: 16000, bits: 32, data: make([]byte, 4)}),
		buildWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, data: le16(5, 6), dataSize: &sz}),
		buildWAV(wavSpec{tag: 1, channels: 1, rate: 16000, bits: 16, data: nil}),
		buildWAV(wavSpec{tag: 0x55, channels: 1, rate: 16000, bits: 16, data: le16(5)}),
		[]byte("RIFF\x00\x00\x00\x00WAVE"),
		[]byte("RIFX"),
		{},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeWAV(data, Limits{MaxSeconds: 600})
		if err != nil {
			var ae *apierror.Error
			if !errors.As(err, &ae) || (ae.Status != 400 && ae.Status != 413) {
				t.Fatalf("error %v is not a 400/413 API error", err)
			}
			return
		}
		checkAgainstHeader(t, data, c)
	})
}

// checkAgainstHeader re-reads the fmt chunk independently and checks that
// the clip agrees with it.
func checkAgainstHeader(t *testing.T, data []byte, c *Clip) {
	t.Helper()
	if c.Channels < 1 || c.Channels > MaxChannels || c.SampleRate < MinSampleRate || c.SampleRate > MaxSampleRate {
		t.Fatalf("clip out of range: %d Hz × %d", c.SampleRate, c.Channels)
	}
	if len(c.Samples) == 0 || len(c.Samples)%c.Channels != 0 {
		t.Fatalf("%d samples for %d channels", len(c.Samples), c.Channels)
	}
	fmtAt := -1
	for pos := 12; pos+8 <= len(data); {
		size := int(binary.LittleEndian.Uint32(data[pos+4:]))
		if string(data[pos:pos+4]) == "fmt " {
			fmtAt = pos + 8
			break
		}
		if size > len(data) {
			break
		}
		pos += 8 + size + size&1
	}
	if fmtAt < 0 {
		t.Fatal("decoded a file without a findable fmt chunk")
	}
	channels := int(binary.LittleEndian.Uint16(data[fmtAt+2:]))
	rate := int(binary.LittleEndian.Uint32(data[fmtAt+4:]))
	bits := int(binary.LittleEndian.Uint16(data[fmtAt+14:]))
	tag := binary.LittleEndian.Uint16(data[fmtAt:])
	if channels != c.Channels || rate != c.SampleRate {
		t.Fatalf("header says %d Hz × %d, clip has %d × %d", rate, channels, c.SampleRate, c.Channels)
	}
	frameBytes := channels * bits / 8
	if c.Frames()*frameBytes > len(data) {
		t.Fatalf("%d frames of %d bytes cannot come from %d bytes", c.Frames(), frameBytes, len(data))
	}
	if float64(c.Frames())/float64(c.SampleRate) > 600 {
		t.Fatal("clip longer than the limit")
	}
	isFloat := tag == wavFormatFloat || (tag == wavFormatExtensible && binary.LittleEndian.Uint16(data[fmtAt+24:]) == wavFormatFloat)
	for i, s := range c.Samples {
		v := float64(s)
		if math.IsNaN(v) || math.IsInf(v, 0) || (!isFloat && (v < -1 || v > 1)) {
			t.Fatalf("sample %d = %v out of range", i, s)
		}
	}
}
