package compare

import (
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
)

func jsonResp(status int, body string, headers ...string) Response {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	return Response{Status: status, Header: h, Body: []byte(body)}
}

func wav(samples ...int16) []byte {
	b := make([]byte, 44+2*len(samples))
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+2*len(samples)))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], 16000)
	binary.LittleEndian.PutUint32(b[28:], 32000)
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(2*len(samples)))
	for i, s := range samples {
		binary.LittleEndian.PutUint16(b[44+2*i:], uint16(s))
	}
	return b
}

func TestExactIgnoresOnlyTopLevelTiming(t *testing.T) {
	a := jsonResp(200, `{"text":"hi","timing":{"wall_ms":3},"segments":[{"start_sample":1,"timing":1}]}`, "X-AudioCPP-Wall-Ms", "3")
	b := jsonResp(200, `{"segments":[{"timing":1,"start_sample":1}],"timing":{"wall_ms":900},"text":"hi"}`, "X-AudioCPP-Wall-Ms", "900")
	if d := Exact(a, b, Options{}); d != nil {
		t.Fatalf("same answer reported as different: %v", d)
	}
	c := jsonResp(200, `{"segments":[{"timing":2,"start_sample":1}],"timing":{},"text":"hi"}`)
	d := Exact(a, c, Options{})
	if d == nil || d.Path != "$.segments[0].timing" || d.Want != "1" || d.Got != "2" {
		t.Fatalf("nested timing must be compared, got %+v", d)
	}
}

func TestExactLocatesFirstDifference(t *testing.T) {
	cases := []struct {
		name       string
		a, b       Response
		path, want string
		got        string
	}{
		{"status", jsonResp(200, `{}`), jsonResp(503, `{}`), "status", "200", "503"},
		{"content type", jsonResp(200, `{}`), Response{Status: 200, Header: http.Header{"Content-Type": {"audio/wav"}}}, "header.Content-Type", `"application/json"`, `"audio/wav"`},
		{"non-timing audiocpp header", jsonResp(200, `{}`, "X-AudioCPP-Model", "a"), jsonResp(200, `{}`, "X-AudioCPP-Model", "b"), "header.X-Audiocpp-Model", `"a"`, `"b"`},
		{"missing key", jsonResp(200, `{"a":1,"b":2}`), jsonResp(200, `{"a":1}`), "$.b", "2", "(absent)"},
		{"extra key", jsonResp(200, `{"a":1}`), jsonResp(200, `{"a":1,"z":true}`), "$.z", "(absent)", "true"},
		{"array length", jsonResp(200, `{"s":[1,2]}`), jsonResp(200, `{"s":[1]}`), "$.s.length", "2", "1"},
		{"number text", jsonResp(200, `{"c":0.5}`), jsonResp(200, `{"c":0.50001}`), "$.c", "0.5", "0.50001"},
		{"type", jsonResp(200, `{"c":"1"}`), jsonResp(200, `{"c":1}`), "$.c", `"1"`, "1"},
		{"top-level array", jsonResp(200, `[1,{"timing":1}]`), jsonResp(200, `[1,{"timing":2}]`), "$[1].timing", "1", "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Exact(c.a, c.b, Options{})
			if d == nil {
				t.Fatal("difference not found")
			}
			if d.Path != c.path || d.Want != c.want || d.Got != c.got {
				t.Fatalf("got %+v, want path %s want %s got %s", d, c.path, c.want, c.got)
			}
		})
	}
}

func TestExactWAVByteForByte(t *testing.T) {
	h := http.Header{"Content-Type": {"audio/wav"}, "X-Audiocpp-Rtf": {"0.1"}}
	h2 := http.Header{"Content-Type": {"audio/wav"}, "X-Audiocpp-Rtf": {"0.7"}}
	a := Response{200, h, wav(1, 2, 3, 4)}
	if d := Exact(a, Response{200, h2, wav(1, 2, 3, 4)}, Options{}); d != nil {
		t.Fatalf("timing header must be ignored: %v", d)
	}
	d := Exact(a, Response{200, h, wav(1, 2, 9, 4)}, Options{})
	if d == nil || !strings.HasPrefix(d.Path, "body[48] (WAV sample 2)") {
		t.Fatalf("got %+v", d)
	}
	// Audio of another length is said as such.
	d = Exact(a, Response{200, h, wav(1, 2, 3)}, Options{})
	if d == nil || d.Path != "body[4] (WAV length)" || !strings.HasPrefix(d.Want, "4 samples at 16000 Hz") || !strings.HasPrefix(d.Got, "3 samples") {
		t.Fatalf("got %+v", d)
	}
	// JSON content type with a body that is not JSON falls back to bytes.
	d = Exact(jsonResp(200, "not json"), jsonResp(200, "not jsoN"), Options{})
	if d == nil || d.Path != "body[7]" {
		t.Fatalf("got %+v", d)
	}
}

func TestExactLongStringShowsWindow(t *testing.T) {
	long := strings.Repeat("A", 500)
	changed := long[:300] + "B" + long[301:]
	d := Exact(jsonResp(200, `{"audio":"`+long+`"}`), jsonResp(200, `{"audio":"`+changed+`"}`), Options{})
	if d == nil || d.Path != "$.audio[char 300]" || !strings.Contains(d.Got, "B") || len(d.Got) > 80 {
		t.Fatalf("got %+v", d)
	}
}

func TestExactDropDataFields(t *testing.T) {
	a := jsonResp(200, `{"object":"list","data":[{"id":"m","loaded":true}]}`)
	b := jsonResp(200, `{"object":"list","data":[{"id":"m","loaded":true,"slots":1,"active_slots":0}]}`)
	if d := Exact(a, b, Options{DropDataFields: []string{"slots", "active_slots"}}); d != nil {
		t.Fatalf("dropped fields compared: %v", d)
	}
	if d := Exact(a, b, Options{}); d == nil || d.Path != "$.data[0].active_slots" {
		t.Fatalf("got %+v", d)
	}
}

func TestApprox(t *testing.T) {
	tol := Tolerance{Abs: 0.01}
	a := jsonResp(200, `{"segments":[{"confidence":0.90,"start_sample":512}],"timing":{"wall_ms":1}}`)
	b := jsonResp(200, `{"segments":[{"confidence":0.905,"start_sample":512}],"timing":{"wall_ms":7}}`)
	r := Approx(a, b, tol)
	if !r.Within || r.Numbers != 2 || r.MaxAbs < 0.0049 || r.MaxAbs > 0.0051 {
		t.Fatalf("got %+v", r)
	}
	c := jsonResp(200, `{"segments":[{"confidence":0.95,"start_sample":512}]}`)
	r = Approx(a, c, tol)
	if r.Within || r.Diff == nil || r.Diff.Path != "$.segments[0].confidence" {
		t.Fatalf("got %+v", r)
	}
	// base64 WAV inside JSON is compared sample by sample.
	w1 := base64.StdEncoding.EncodeToString(wav(100, 200, 300))
	w2 := base64.StdEncoding.EncodeToString(wav(101, 200, 300))
	w3 := base64.StdEncoding.EncodeToString(wav(100, 200, 3000))
	if r := Approx(jsonResp(200, `{"audio":"`+w1+`"}`), jsonResp(200, `{"audio":"`+w2+`"}`), tol); !r.Within {
		t.Fatalf("1-LSB difference must be within 0.01: %+v", r)
	}
	r = Approx(jsonResp(200, `{"audio":"`+w1+`"}`), jsonResp(200, `{"audio":"`+w3+`"}`), tol)
	if r.Within || r.Diff.Path != "$.audio (WAV sample 2)" {
		t.Fatalf("got %+v", r.Diff)
	}
	// WAV bodies.
	h := http.Header{"Content-Type": {"audio/wav"}}
	r = Approx(Response{200, h, wav(0, 0)}, Response{200, h, wav(0, 0, 0)}, tol)
	if r.Within || r.Diff.Path != "body (WAV samples)" {
		t.Fatalf("got %+v", r.Diff)
	}
	// Structure still has to match.
	r = Approx(jsonResp(200, `{"text":"a"}`), jsonResp(200, `{"text":"b"}`), tol)
	if r.Within || r.Diff.Path != "$.text" {
		t.Fatalf("got %+v", r)
	}
}
