// Package compare decides whether two HTTP responses of the wire contract are
// the same answer. Exact compares within one backend: status, Content-Type,
// the non-timing X-AudioCPP-* headers and the body (JSON by value after
// removing only the top-level "timing" object, anything else byte for byte).
// Approx compares across backends, where numbers may differ by a stated
// tolerance.
package compare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strings"
)

// Response is one recorded HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Diff locates the first difference between a reference and a candidate.
// Path is "status", "header.<Name>", "body[<byte offset>]" or a JSON path such
// as "$.segments[0].confidence".
type Diff struct {
	Path string `json:"path"`
	Want string `json:"want"` // the reference's value
	Got  string `json:"got"`  // the candidate's value
}

func (d *Diff) String() string {
	return fmt.Sprintf("%s: want %s, got %s", d.Path, d.Want, d.Got)
}

// TimingHeaders are the volatile X-AudioCPP-* headers removed before comparing.
var TimingHeaders = []string{"X-Audiocpp-Wall-Ms", "X-Audiocpp-Audio-Duration-Ms", "X-Audiocpp-Rtf"}

// Options adjust what Exact ignores beyond the fixed volatile fields.
type Options struct {
	// DropDataFields removes these keys from every object inside the top-level
	// "data" array before comparing (used for /v1/models, whose slot fields
	// legitimately differ between runtimes).
	DropDataFields []string
}

// Exact reports the first difference between ref and got, or nil when they
// are the same answer.
func Exact(ref, got Response, opt Options) *Diff {
	if ref.Status != got.Status {
		return &Diff{Path: "status", Want: fmt.Sprint(ref.Status), Got: fmt.Sprint(got.Status)}
	}
	if d := compareHeaders(ref.Header, got.Header); d != nil {
		return d
	}
	if IsJSON(ref.Header.Get("Content-Type")) {
		a, errA := decode(ref.Body)
		b, errB := decode(got.Body)
		if errA == nil && errB == nil {
			a = normalize(a, opt)
			b = normalize(b, opt)
			return firstDiff("$", a, b)
		}
	}
	return bytesDiff(ref.Body, got.Body)
}

// IsJSON reports whether a Content-Type names JSON.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func compareHeaders(a, b http.Header) *Diff {
	names := map[string]bool{"Content-Type": true}
	for _, h := range []http.Header{a, b} {
		for k := range h {
			ck := http.CanonicalHeaderKey(k)
			if strings.HasPrefix(ck, "X-Audiocpp-") && !isTiming(ck) {
				names[ck] = true
			}
		}
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		va, vb := strings.Join(a.Values(k), ", "), strings.Join(b.Values(k), ", ")
		if va != vb {
			return &Diff{Path: "header." + k, Want: quoteOrAbsent(va, len(a.Values(k)) > 0), Got: quoteOrAbsent(vb, len(b.Values(k)) > 0)}
		}
	}
	return nil
}

func quoteOrAbsent(v string, present bool) string {
	if !present {
		return "(absent)"
	}
	return fmt.Sprintf("%q", v)
}

func isTiming(canonical string) bool {
	for _, t := range TimingHeaders {
		if strings.EqualFold(t, canonical) {
			return true
		}
	}
	return false
}

func decode(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// normalize removes the top-level "timing" key and, inside "data", the
// fields the options name.
func normalize(v any, opt Options) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, val := range obj {
		if k == "timing" {
			continue
		}
		out[k] = val
	}
	if len(opt.DropDataFields) > 0 {
		if items, ok := out["data"].([]any); ok {
			cleaned := make([]any, len(items))
			for i, it := range items {
				if m, ok := it.(map[string]any); ok {
					c := make(map[string]any, len(m))
					for k, val := range m {
						c[k] = val
					}
					for _, f := range opt.DropDataFields {
						delete(c, f)
					}
					it = c
				}
				cleaned[i] = it
			}
			out["data"] = cleaned
		}
	}
	return out
}

func firstDiff(path string, a, b any) *Diff {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return &Diff{Path: path, Want: render(a), Got: render(b)}
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "." + k
			x, inA := av[k]
			y, inB := bv[k]
			switch {
			case !inA:
				return &Diff{Path: p, Want: "(absent)", Got: render(y)}
			case !inB:
				return &Diff{Path: p, Want: render(x), Got: "(absent)"}
			}
			if d := firstDiff(p, x, y); d != nil {
				return d
			}
		}
		return nil
	case []any:
		bv, ok := b.([]any)
		if !ok {
			return &Diff{Path: path, Want: render(a), Got: render(b)}
		}
		for i := 0; i < len(av) && i < len(bv); i++ {
			if d := firstDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]); d != nil {
				return d
			}
		}
		if len(av) != len(bv) {
			return &Diff{Path: path + ".length", Want: fmt.Sprint(len(av)), Got: fmt.Sprint(len(bv))}
		}
		return nil
	case string:
		bv, ok := b.(string)
		if !ok {
			return &Diff{Path: path, Want: render(a), Got: render(b)}
		}
		if av != bv {
			return stringDiff(path, av, bv)
		}
		return nil
	case json.Number:
		bv, ok := b.(json.Number)
		if !ok || av.String() != bv.String() {
			return &Diff{Path: path, Want: render(a), Got: render(b)}
		}
		return nil
	default: // bool, nil
		if a != b {
			return &Diff{Path: path, Want: render(a), Got: render(b)}
		}
		return nil
	}
}

const maxShown = 96

func render(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(string(data))
}

func clip(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return s[:maxShown] + fmt.Sprintf("...(%d bytes)", len(s))
}

// stringDiff shows short strings whole and long ones (base64 audio) around
// the first differing character.
func stringDiff(path, a, b string) *Diff {
	if len(a) <= maxShown && len(b) <= maxShown {
		return &Diff{Path: path, Want: render(a), Got: render(b)}
	}
	i := commonPrefix([]byte(a), []byte(b))
	return &Diff{
		Path: fmt.Sprintf("%s[char %d]", path, i),
		Want: window(a, i), Got: window(b, i),
	}
}

func window(s string, i int) string {
	lo := max(i-8, 0)
	hi := min(i+24, len(s))
	if lo >= len(s) {
		return fmt.Sprintf("(end of string, length %d)", len(s))
	}
	return fmt.Sprintf("%q (length %d)", s[lo:hi], len(s))
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func bytesDiff(a, b []byte) *Diff {
	if bytes.Equal(a, b) {
		return nil
	}
	i := commonPrefix(a, b)
	show := func(s []byte) string {
		if i >= len(s) {
			return fmt.Sprintf("(end of body, %d bytes)", len(s))
		}
		hi := min(i+16, len(s))
		return fmt.Sprintf("% x (body %d bytes)", s[i:hi], len(s))
	}
	path := fmt.Sprintf("body[%d]", i)
	if wa, ok := ParseWAV(a); ok && wa.Bits > 0 {
		wb, okB := ParseWAV(b)
		if okB && i < wa.DataOffset && len(wa.Data) != len(wb.Data) && wb.Bits > 0 {
			// The RIFF sizes differ because the audio has another length.
			return &Diff{Path: fmt.Sprintf("body[%d] (WAV length)", i),
				Want: fmt.Sprintf("%d samples at %d Hz (body %d bytes)", len(wa.Data)/(wa.Bits/8), wa.SampleRate, len(a)),
				Got:  fmt.Sprintf("%d samples at %d Hz (body %d bytes)", len(wb.Data)/(wb.Bits/8), wb.SampleRate, len(b))}
		}
		if i >= wa.DataOffset {
			path = fmt.Sprintf("body[%d] (WAV sample %d)", i, (i-wa.DataOffset)/(wa.Bits/8))
		}
	}
	return &Diff{Path: path, Want: show(a), Got: show(b)}
}
