package compare

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Tolerance bounds how far a number may move across backends: a value b is
// within tolerance of a when |a-b| <= Abs + Rel*|a|. WAV samples are compared
// as floats in [-1, 1].
type Tolerance struct {
	Abs float64 `json:"abs"`
	Rel float64 `json:"rel"`
}

// ApproxResult is the outcome of a cross-backend comparison.
type ApproxResult struct {
	Within  bool    `json:"within"`
	Numbers int     `json:"numbers"`        // numeric values (and WAV samples) compared
	MaxAbs  float64 `json:"max_abs_diff"`   // largest absolute difference seen
	Diff    *Diff   `json:"diff,omitempty"` // first value out of tolerance or structural difference
}

// Approx compares ref and got like Exact, except that numbers (and WAV
// samples, in bodies or base64 "audio" fields) may differ within tol.
func Approx(ref, got Response, tol Tolerance) ApproxResult {
	res := ApproxResult{Within: true}
	fail := func(d *Diff) ApproxResult {
		res.Within = false
		if res.Diff == nil {
			res.Diff = d
		}
		return res
	}
	if ref.Status != got.Status {
		return fail(&Diff{Path: "status", Want: fmt.Sprint(ref.Status), Got: fmt.Sprint(got.Status)})
	}
	if d := compareHeaders(ref.Header, got.Header); d != nil {
		return fail(d)
	}
	if IsJSON(ref.Header.Get("Content-Type")) {
		a, errA := decode(ref.Body)
		b, errB := decode(got.Body)
		if errA == nil && errB == nil {
			w := approxWalker{tol: tol, res: &res}
			w.walk("$", normalize(a, Options{}), normalize(b, Options{}))
			return res
		}
	}
	if wa, ok := ParseWAV(ref.Body); ok {
		if wb, ok := ParseWAV(got.Body); ok {
			w := approxWalker{tol: tol, res: &res}
			w.wav("body", wa, wb)
			return res
		}
	}
	if d := bytesDiff(ref.Body, got.Body); d != nil {
		return fail(d)
	}
	return res
}

type approxWalker struct {
	tol Tolerance
	res *ApproxResult
}

func (w *approxWalker) fail(d *Diff) {
	w.res.Within = false
	if w.res.Diff == nil {
		w.res.Diff = d
	}
}

func (w *approxWalker) number(path string, a, b float64) {
	w.res.Numbers++
	d := math.Abs(a - b)
	if d > w.res.MaxAbs {
		w.res.MaxAbs = d
	}
	if d > w.tol.Abs+w.tol.Rel*math.Abs(a) {
		w.fail(&Diff{Path: path, Want: fmt.Sprint(a), Got: fmt.Sprint(b)})
	}
}

func (w *approxWalker) walk(path string, a, b any) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			w.fail(&Diff{Path: path, Want: render(a), Got: render(b)})
			return
		}
		keys := make([]string, 0, len(av))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				w.fail(&Diff{Path: path + "." + k, Want: "(absent)", Got: render(bv[k])})
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			y, ok := bv[k]
			if !ok {
				w.fail(&Diff{Path: path + "." + k, Want: render(av[k]), Got: "(absent)"})
				continue
			}
			w.walk(path+"."+k, av[k], y)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			w.fail(&Diff{Path: path, Want: render(a), Got: render(b)})
			return
		}
		if len(av) != len(bv) {
			w.fail(&Diff{Path: path + ".length", Want: fmt.Sprint(len(av)), Got: fmt.Sprint(len(bv))})
		}
		for i := 0; i < len(av) && i < len(bv); i++ {
			w.walk(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])
		}
	case json.Number:
		bv, ok := b.(json.Number)
		if !ok {
			w.fail(&Diff{Path: path, Want: render(a), Got: render(b)})
			return
		}
		x, errX := av.Float64()
		y, errY := bv.Float64()
		if errX != nil || errY != nil {
			if av != bv {
				w.fail(&Diff{Path: path, Want: av.String(), Got: bv.String()})
			}
			return
		}
		w.number(path, x, y)
	case string:
		bv, ok := b.(string)
		if !ok {
			w.fail(&Diff{Path: path, Want: render(a), Got: render(b)})
			return
		}
		if av == bv {
			return
		}
		// base64 WAV (speech json responses, tasks/run audio): compare samples.
		da, errA := base64.StdEncoding.DecodeString(av)
		db, errB := base64.StdEncoding.DecodeString(bv)
		if errA == nil && errB == nil {
			wa, okA := ParseWAV(da)
			wb, okB := ParseWAV(db)
			if okA && okB {
				w.wav(path, wa, wb)
				return
			}
		}
		w.fail(stringDiff(path, av, bv))
	default:
		if a != b {
			w.fail(&Diff{Path: path, Want: render(a), Got: render(b)})
		}
	}
}

func (w *approxWalker) wav(path string, a, b WAV) {
	if a.SampleRate != b.SampleRate || a.Channels != b.Channels || a.Bits != b.Bits {
		w.fail(&Diff{Path: path + " (WAV format)",
			Want: fmt.Sprintf("%d Hz, %d ch, %d bit", a.SampleRate, a.Channels, a.Bits),
			Got:  fmt.Sprintf("%d Hz, %d ch, %d bit", b.SampleRate, b.Channels, b.Bits)})
		return
	}
	sa, sb := a.Floats(), b.Floats()
	if len(sa) != len(sb) {
		w.fail(&Diff{Path: path + " (WAV samples)", Want: fmt.Sprint(len(sa)), Got: fmt.Sprint(len(sb))})
	}
	for i := 0; i < len(sa) && i < len(sb); i++ {
		w.number(fmt.Sprintf("%s (WAV sample %d)", path, i), float64(sa[i]), float64(sb[i]))
	}
}

// WAV is a parsed RIFF WAVE file with integer PCM samples.
type WAV struct {
	SampleRate int
	Channels   int
	Bits       int
	DataOffset int    // byte offset of the first sample in the file
	Data       []byte // raw sample bytes
}

// ParseWAV reads a RIFF/WAVE PCM file; ok is false for anything else.
func ParseWAV(b []byte) (WAV, bool) {
	var w WAV
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return w, false
	}
	fmtSeen := false
	for off := 12; off+8 <= len(b); {
		id := string(b[off : off+4])
		size := int(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		body := off + 8
		if size < 0 || body+size > len(b) {
			if id == "data" { // truncated or streaming size: take what is there
				size = len(b) - body
			} else {
				return w, false
			}
		}
		switch id {
		case "fmt ":
			if size < 16 {
				return w, false
			}
			format := binary.LittleEndian.Uint16(b[body:])
			if format != 1 && format != 0xFFFE {
				return w, false
			}
			w.Channels = int(binary.LittleEndian.Uint16(b[body+2:]))
			w.SampleRate = int(binary.LittleEndian.Uint32(b[body+4:]))
			w.Bits = int(binary.LittleEndian.Uint16(b[body+14:]))
			fmtSeen = true
		case "data":
			if !fmtSeen || (w.Bits != 16 && w.Bits != 8 && w.Bits != 32) {
				return w, false
			}
			w.DataOffset = body
			w.Data = b[body : body+size]
			return w, true
		}
		off = body + size + size%2
	}
	return w, false
}

// Floats returns the samples scaled to [-1, 1].
func (w WAV) Floats() []float32 {
	switch w.Bits {
	case 8:
		out := make([]float32, len(w.Data))
		for i, v := range w.Data {
			out[i] = (float32(v) - 128) / 128
		}
		return out
	case 32:
		out := make([]float32, len(w.Data)/4)
		for i := range out {
			out[i] = float32(int32(binary.LittleEndian.Uint32(w.Data[4*i:]))) / 2147483648
		}
		return out
	default:
		out := make([]float32, len(w.Data)/2)
		for i := range out {
			out[i] = float32(int16(binary.LittleEndian.Uint16(w.Data[2*i:]))) / 32768
		}
		return out
	}
}
