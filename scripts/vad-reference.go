//go:build ignore

// vad-reference.go prepares WAV clips for the onnxruntime reference run:
// it decodes each clip with the server's own WAV reader, mixes it to mono
// and resamples it to 16 kHz exactly as the silero_vad family does, and
// writes the samples as little-endian float32 (NAME.f32) with a NAME.json
// describing the input (rate, channels, frames). Comparing probabilities on
// the very samples the family sees keeps the check about the network, not
// about two different resamplers.
//
//	go run scripts/vad-reference.go -out DIR clip.wav...
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/audioproof/audioproof/server/audio"
)

func main() {
	out := flag.String("out", "", "folder for the .f32 and .json files (required)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/vad-reference.go -out DIR clip.wav...")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		clip, err := audio.DecodeWAV(data, audio.Limits{})
		if err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		mono := audio.Resample(audio.Mono(clip), 16000)
		buf := make([]byte, 4*len(mono.Samples))
		for i, v := range mono.Samples {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if err := os.WriteFile(filepath.Join(*out, base+".f32"), buf, 0o644); err != nil {
			fail(err)
		}
		meta, _ := json.Marshal(map[string]int{
			"sample_rate": clip.SampleRate, "channels": clip.Channels, "frames": clip.Frames(), "frames_16k": len(mono.Samples),
		})
		if err := os.WriteFile(filepath.Join(*out, base+".json"), meta, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "vad-reference:", err)
	os.Exit(1)
}
