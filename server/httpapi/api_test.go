package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gavv/httpexpect/v2"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/legacy"
	"github.com/audioproof/audioproof/runtimes/parallel"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/families/fixture"
	"github.com/audioproof/audioproof/server/httpapi"
)

// variant is one way of running the server: the parity suite runs the same
// requests against every variant and compares the answers.
type variant struct {
	name     string
	parallel bool
	slots    string // "" = omitted; otherwise the JSON value of every model's slots
}

var variants = []variant{
	{name: "legacy"},
	{name: "parallel-omitted", parallel: true},
	{name: "parallel-slots1", parallel: true, slots: "1"},
}

// fixtureConfig is a config with one fixture model per task used below.
func fixtureConfig(t *testing.T, v variant, extra string) string {
	slots := ""
	if v.slots != "" {
		slots = `, "slots": ` + v.slots
	}
	models := []string{
		`{"id": "tts", "family": "fixture", "task": "tts", "path": "voice-a.bin"%s}`,
		`{"id": "tts-stream", "family": "fixture", "task": "tts", "mode": "streaming", "path": "voice-s.bin"%s}`,
		`{"id": "asr", "family": "fixture", "task": "asr", "path": "asr-a.bin"%s}`,
		`{"id": "asr-stream", "family": "fixture", "task": "asr", "mode": "streaming", "path": "asr-s.bin"%s}`,
		`{"id": "vad", "family": "fixture", "task": "vad", "path": "vad-a.bin"%s,
		  "voice_presets": {"narrator": {"voice_id": "n1"}}}`,
		`{"id": "diar", "family": "fixture", "task": "diar", "mode": "streaming", "path": "diar-a.bin"%s}`,
	}
	for i, m := range models {
		models[i] = fmt.Sprintf(m, slots)
	}
	return fmt.Sprintf(`{"busy_timeout_ms": 0, "ui_management": true, "cors_origins": "*", "lazy_load": true %s,
		"models": [%s]}`, extra, strings.Join(models, ","))
}

// startServer builds the runtime the variant selects and serves the API on
// a loopback listener. Everything is closed when the test ends.
func startServer(t *testing.T, v variant, cfgJSON string) (*httpexpect.Expect, string) {
	t.Helper()
	return startServerIn(t, v, cfgJSON, t.TempDir(), nil)
}

// startServerIn is startServer with relative config paths resolved in dir and
// a chance to adjust the runtime options (tweak may be nil).
func startServerIn(t *testing.T, v variant, cfgJSON, dir string, tweak func(*runtimes.Options)) (*httpexpect.Expect, string) {
	t.Helper()
	fixture.Reset()
	cfg, err := config.Parse([]byte(cfgJSON), dir)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	opts := runtimes.Options{Config: cfg}
	if tweak != nil {
		tweak(&opts)
	}
	var rt runtimes.Runtime
	if v.parallel {
		rt, err = parallel.New(opts)
	} else {
		rt, err = legacy.New(opts)
	}
	if err != nil {
		t.Fatalf("runtime: %v", err)
	}
	if err := rt.Start(t.Context()); err != nil {
		t.Fatalf("start: %v", err)
	}
	srv := httpapi.New(httpapi.Options{Config: cfg, Runtime: rt})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		rt.Close()
	})
	e := httpexpect.WithConfig(httpexpect.Config{
		BaseURL:  ts.URL,
		Reporter: httpexpect.NewAssertReporter(t),
		Client:   &http.Client{Timeout: 20 * time.Second},
	})
	return e, ts.URL
}

func wavBytes(frames int, rate int) []byte {
	samples := make([]float32, frames)
	for i := range samples {
		samples[i] = float32(i%50) / 100
	}
	return audio.EncodeWAV(&audio.Clip{SampleRate: rate, Channels: 1, Samples: samples})
}

func multipartBody(t *testing.T, fields map[string]string, files map[string][]byte) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		w.WriteField(k, v)
	}
	for name, data := range files {
		fw, err := w.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(data)
	}
	w.Close()
	return &buf, w.FormDataContentType()
}

func expectError(r *httpexpect.Response, status int, typ, contains string) {
	r.Status(status)
	obj := r.JSON().Object()
	obj.Keys().ContainsOnly("error")
	e := obj.Value("error").Object()
	e.Keys().ContainsOnly("message", "type")
	e.Value("type").IsEqual(typ)
	if contains != "" {
		e.Value("message").String().Contains(contains)
	}
}

func forEachVariant(t *testing.T, fn func(t *testing.T, v variant)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { fn(t, v) })
	}
}

func TestHealthAndModels(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		h := e.GET("/health").Expect().Status(200).JSON().Object()
		h.Value("status").IsEqual("ok")
		h.Value("backend").IsEqual("cpu")
		h.Value("models").IsEqual(6)
		h.Value("ui_management").IsEqual(true)

		list := e.GET("/v1/models").Expect().Status(200).JSON().Object()
		list.Value("object").IsEqual("list")
		data := list.Value("data").Array()
		data.Length().IsEqual(6)
		first := data.Value(0).Object()
		first.Value("id").IsEqual("tts")
		first.Value("object").IsEqual("model")
		first.Value("owned_by").IsEqual("engine")
		first.Value("family").IsEqual("fixture")
		first.Value("task").IsEqual("tts")
		first.Value("mode").IsEqual("offline")
		first.Value("loaded").IsEqual(false)
		slotFields := []string{"slots", "active_slots", "queued_requests", "max_parallel_slots"}
		if v.parallel {
			first.ContainsKey("slots")
			first.Value("slots").IsEqual(1)
			first.Value("active_slots").IsEqual(0)
			first.Value("queued_requests").IsEqual(0)
			first.Value("max_parallel_slots").IsNull()
		} else {
			for _, k := range slotFields {
				first.NotContainsKey(k)
			}
		}
		// After a request the model is loaded.
		e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "input": "hi"}).Expect().Status(200)
		row := e.GET("/v1/models").WithQuery("include_session_options", "true").Expect().Status(200).
			JSON().Object().Value("data").Array().Value(0).Object()
		row.Value("loaded").IsEqual(true)
		row.Value("session_options").Object().IsEmpty()
		if v.parallel {
			// the advertised capacity of the loaded model (fixture default 4), whatever the configured count
			row.Value("max_parallel_slots").IsEqual(fixture.DefaultCapacity)
			row.Value("active_slots").IsEqual(0)
		}
	})
}

func TestUnknownEndpointAndCORS(t *testing.T) {
	e, _ := startServer(t, variants[0], fixtureConfig(t, variants[0], ""))
	expectError(e.GET("/nope").Expect(), 404, "not_found", "unknown endpoint: /nope")
	r405 := e.GET("/v1/audio/speech").Expect()
	expectError(r405, 405, "invalid_request_error", "method GET is not allowed on /v1/audio/speech: use POST")
	r405.Header("Allow").IsEqual("POST")
	expectError(e.POST("/health").Expect(), 405, "invalid_request_error", "use GET")
	r := e.OPTIONS("/v1/audio/speech").WithHeader("Origin", "http://example.test").Expect()
	r.Status(204)
	r.Header("Access-Control-Allow-Origin").IsEqual("http://example.test")
	r.Header("Access-Control-Allow-Headers").IsEqual("*")
	r.Header("Access-Control-Allow-Methods").IsEqual("GET, POST")
	e.GET("/health").WithHeader("Origin", "http://a.test").Expect().Header("Access-Control-Allow-Origin").IsEqual("http://a.test")
}

func TestSpeech(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		r := e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "hello"}).Expect().Status(200)
		r.Header("Content-Type").IsEqual("audio/wav")
		r.Header("X-AudioCPP-Wall-Ms").NotEmpty()
		r.Header("X-AudioCPP-Audio-Duration-Ms").IsEqual("0.125")
		r.Header("X-AudioCPP-RTF").NotEmpty()
		body := r.Body().Raw()
		clip, err := audio.DecodeWAV([]byte(body), audio.Limits{})
		if err != nil || clip.SampleRate != fixture.SampleRate || clip.Frames() != 2 {
			t.Fatalf("speech body is not the fixture's WAV: %v %+v", err, clip)
		}
		j := e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "hello", "response_format": "json"}).
			Expect().Status(200).JSON().Object()
		j.Keys().ContainsOnly("audio", "format", "timing")
		j.Value("format").IsEqual("wav")
		j.Value("timing").Object().Keys().ContainsOnly("wall_ms", "audio_duration_ms", "rtf")
		b, _ := base64.StdEncoding.DecodeString(j.Value("audio").String().Raw())
		if string(b) != body {
			t.Fatalf("json audio differs from the WAV body")
		}

		expectError(e.POST("/v1/audio/speech").WithBytes([]byte(`{"model":`)).Expect(), 400, "invalid_request_error", "invalid JSON")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts"}).Expect(), 400, "invalid_request_error", `"input"`)
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"input": "x"}).Expect(), 400, "invalid_request_error", `"model"`)
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "ghost", "input": "x"}).Expect(), 404, "not_found", "ghost")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "asr", "input": "x"}).Expect(), 400, "invalid_request_error", "task")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "stream": true}).Expect(), 400, "invalid_request_error", "pcm")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "stream": true, "response_format": "pcm"}).Expect(), 400, "invalid_request_error", "not a streaming model")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "response_format": "mp3"}).Expect(), 400, "invalid_request_error", "response_format")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "speed": -1}).Expect(), 400, "invalid_request_error", "speed")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "busy_timeout_ms": -5}).Expect(), 400, "invalid_request_error", "busy_timeout_ms")
		expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "x", "options": []int{1}}).Expect(), 400, "invalid_request_error", "options")

		sse := e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts-stream", "input": "hello", "stream": true, "response_format": "pcm"}).
			Expect().Status(200)
		sse.Header("Content-Type").IsEqual("text/event-stream")
		text := sse.Body().Raw()
		if !strings.Contains(text, `"type":"speech.audio.delta"`) || !strings.Contains(text, `"type":"speech.audio.done"`) || !strings.HasSuffix(text, "data: [DONE]\n\n") {
			t.Fatalf("unexpected SSE stream:\n%s", text)
		}
		raw := e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts-stream", "input": "hello", "stream_format": "audio", "response_format": "pcm"}).
			Expect().Status(200)
		raw.Header("Content-Type").IsEqual("application/octet-stream")
		if got := raw.Body().Raw(); got != string(audio.EncodePCM16(fixture.OutputSamples)) {
			t.Fatalf("raw PCM stream = %q", got)
		}
	})
}

func TestTranscriptions(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		root := t.TempDir()
		inside := filepath.Join(root, "in.wav")
		os.WriteFile(inside, wavBytes(1600, 16000), 0o644)
		outside := filepath.Join(t.TempDir(), "out.wav")
		os.WriteFile(outside, wavBytes(1600, 16000), 0o644)
		e, _ := startServer(t, v, fixtureConfig(t, v, fmt.Sprintf(`, "audio_roots": [%q]`, root)))

		body, ct := multipartBody(t, map[string]string{"model": "asr"}, map[string][]byte{"clip.wav": wavBytes(1600, 16000)})
		obj := e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect().Status(200).JSON().Object()
		obj.Value("text").IsEqual("asr-a.bin")
		obj.Value("timing").Object().Value("audio_duration_ms").IsEqual(100)

		b64 := base64.StdEncoding.EncodeToString(wavBytes(1600, 16000))
		e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio_base64": b64}).Expect().Status(200).
			JSON().Object().Value("text").IsEqual("asr-a.bin")
		e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio": inside}).Expect().Status(200)
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio": outside}).Expect(), 403, "forbidden", "audio_roots")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio": root + "/../" + filepath.Base(filepath.Dir(outside)) + "/out.wav"}).Expect(), 403, "forbidden", "outside")
		os.Symlink(outside, filepath.Join(root, "link.wav"))
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio": filepath.Join(root, "link.wav")}).Expect(), 403, "forbidden", "outside")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio": filepath.Join(root, "none.wav")}).Expect(), 400, "invalid_request_error", "does not exist")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr"}).Expect(), 400, "invalid_request_error", "no input audio")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio_base64": "!!"}).Expect(), 400, "invalid_request_error", "base64")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr", "audio_base64": base64.StdEncoding.EncodeToString([]byte("not a wav file at all"))}).Expect(), 400, "invalid_request_error", "")
		expectError(e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "tts", "audio_base64": b64}).Expect(), 400, "invalid_request_error", "task")

		// unreserved form fields reach the model as options (the fixture rejects a bad delay)
		body, ct = multipartBody(t, map[string]string{"model": "asr", "fixture_delay_ms": "soon"}, map[string][]byte{"clip.wav": wavBytes(10, 16000)})
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect(), 400, "invalid_request_error", "fixture_delay_ms")
		body, ct = multipartBody(t, map[string]string{"model": "asr", "options": "{"}, map[string][]byte{"clip.wav": wavBytes(10, 16000)})
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect(), 400, "invalid_request_error", "options")

		body, ct = multipartBody(t, map[string]string{"model": "asr"}, map[string][]byte{"clip.mp3": wavBytes(10, 16000)})
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect(), 400, "invalid_request_error", "WAV")
		body, ct = multipartBody(t, map[string]string{"model": "asr"}, nil)
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect(), 400, "invalid_request_error", `"file"`)
		body, ct = multipartBody(t, map[string]string{}, map[string][]byte{"a.wav": wavBytes(10, 16000)})
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect(), 400, "invalid_request_error", `"model"`)
		expectError(e.POST("/v1/audio/transcriptions").WithHeader("Content-Type", "multipart/form-data; boundary=x").WithBytes([]byte("garbage")).Expect(), 400, "invalid_request_error", "multipart")

		det := e.POST("/v1/audio/transcriptions/details").WithJSON(map[string]any{"model": "vad", "audio_base64": b64}).Expect().Status(200).JSON().Object()
		det.Value("segments").Array().Length().IsEqual(1)
		det.Value("sample_rate").IsEqual(16000)
		det.ContainsKey("timing")
		expectError(e.POST("/v1/audio/transcriptions/details").WithJSON(map[string]any{"model": "vad", "audio_base64": b64, "stream": true}).Expect(), 400, "invalid_request_error", "stream")

		sse := e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "asr-stream", "audio_base64": b64, "stream": "true"}).Expect().Status(200).Body().Raw()
		if !strings.Contains(sse, "transcript.text.delta") || !strings.Contains(sse, `"text":"asr-s.bin"`) || !strings.HasSuffix(sse, "data: [DONE]\n\n") {
			t.Fatalf("transcription stream:\n%s", sse)
		}
		dsse := e.POST("/v1/audio/transcriptions").WithJSON(map[string]any{"model": "diar", "audio_base64": b64, "stream": true}).Expect().Status(200).Body().Raw()
		if !strings.Contains(dsse, "diarization.done") {
			t.Fatalf("diarization stream:\n%s", dsse)
		}
	})
}

func TestTasksAndBatches(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		b64 := base64.StdEncoding.EncodeToString(wavBytes(1600, 16000))
		run := e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "asr", "request": map[string]any{"audio_base64": b64}}).Expect().Status(200).JSON().Object()
		run.Value("text").IsEqual("asr-a.bin")
		run.Value("timing").Object().ContainsKey("wall_ms")
		vad := e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "vad", "audio_base64": b64}).Expect().Status(200).JSON().Object()
		vad.Value("segments").Array().Length().IsEqual(1)
		tts := e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "input": "x"}).Expect().Status(200).JSON().Object()
		tts.Value("sample_rate").IsEqual(16000)
		tts.Value("channels").IsEqual(1)
		tts.Value("timing").Object().Keys().ContainsOnly("wall_ms", "audio_duration_ms", "rtf")
		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "asr", "audio": "/etc/passwd"}).Expect(), 403, "forbidden", "")
		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "asr", "audio": "x.wav", "audio_base64": b64}).Expect(), 400, "invalid_request_error", "not both")
		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "asr", "artifacts": "bad"}).Expect(), 400, "invalid_request_error", "artifacts")
		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "asr"}).Expect(), 400, "invalid_request_error", "")
		expectError(e.POST("/v1/tasks/run").WithJSON([]int{1}).Expect(), 400, "invalid_request_error", "JSON object")

		st := e.POST("/v1/tasks/stream").WithJSON(map[string]any{"model": "tts", "input": "x"}).Expect().Status(200).JSON().Object()
		st.Value("events").Array().NotEmpty()
		st.Value("result").Object().Value("timing").Object().ContainsKey("ttft_ms")

		batch := e.POST("/v1/tasks/batch").WithJSON(map[string]any{"model": "asr", "requests": []any{
			map[string]any{"audio_base64": b64}, map[string]any{"audio_base64": b64}}}).Expect().Status(200).Body().Raw()
		if strings.Count(batch, "task.batch.result") != 2 || !strings.Contains(batch, `"result_count":2`) {
			t.Fatalf("batch stream:\n%s", batch)
		}
		expectError(e.POST("/v1/tasks/batch").WithJSON(map[string]any{"model": "asr", "requests": []any{}}).Expect(), 400, "invalid_request_error", "requests")

		body, ct := multipartBody(t, map[string]string{"model": "asr"}, map[string][]byte{"a.wav": wavBytes(100, 16000), "b.wav": wavBytes(200, 16000)})
		bt := e.POST("/v1/batches/transcriptions").WithHeader("Content-Type", ct).WithBytes(body.Bytes()).Expect().Status(200).Body().Raw()
		if strings.Count(bt, "batch.transcription.result") != 2 || !strings.Contains(bt, "batch.transcription.done") {
			t.Fatalf("batch transcription stream:\n%s", bt)
		}
	})
}

func TestVoices(t *testing.T) {
	e, _ := startServer(t, variants[0], fixtureConfig(t, variants[0], ""))
	e.GET("/v1/audio/voices").WithQuery("model", "vad").Expect().Status(200).JSON().Object().Value("voices").Array().ConsistsOf("narrator")
	e.GET("/v1/audio/voices").WithQuery("model", "ghost").Expect().Status(200).JSON().Object().Value("voices").Array().IsEmpty()
}

func TestBodyLimit(t *testing.T) {
	e, _ := startServer(t, variants[0], fixtureConfig(t, variants[0], `, "max_request_body_bytes": 1024`))
	big := strings.Repeat("a", 4096)
	expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "input": big}).Expect(), 413, "invalid_request_error", "max_request_body_bytes")
	// chunked (no Content-Length) bodies are limited as well
	expectError(e.POST("/v1/tasks/run").WithChunked(strings.NewReader(`{"model":"tts","input":"`+big+`"}`)).Expect(), 413, "invalid_request_error", "max_request_body_bytes")
}

func TestManagement(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		e.POST("/v1/models/load").WithJSON(map[string]any{"id": "new", "family": "fixture", "path": "new.bin", "task": "asr"}).
			Expect().Status(200).JSON().Object().IsEqual(map[string]any{"id": "new", "loaded": true, "reconfigured": false})
		e.POST("/v1/models/load").WithJSON(map[string]any{"id": "new", "family": "fixture", "path": "new.bin", "task": "asr"}).
			Expect().Status(200).JSON().Object().Value("reconfigured").IsEqual(false)
		e.POST("/v1/models/load").WithJSON(map[string]any{"id": "new", "family": "fixture", "path": "newer.bin", "task": "asr"}).
			Expect().Status(200).JSON().Object().Value("reconfigured").IsEqual(true)
		b64 := base64.StdEncoding.EncodeToString(wavBytes(160, 16000))
		e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "new", "audio_base64": b64}).Expect().JSON().Object().Value("text").IsEqual("newer.bin")
		expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "x", "family": "nope", "path": "p"}).Expect(), 400, "invalid_request_error", "nope")
		expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "x", "family": "fixture"}).Expect(), 400, "invalid_request_error", "path")
		expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "x", "family": "fixture", "path": "p", "bogus": 1}).Expect(), 400, "invalid_request_error", "bogus")
		if !v.parallel {
			for _, slots := range []any{1, 2, nil, false, "4"} {
				expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "s", "family": "fixture", "path": "p", "slots": slots}).Expect(),
					400, "invalid_request_error", "slots requires --parallel-jobs at server startup")
			}
			e.GET("/v1/models").Expect().JSON().Object().Value("data").Array().Length().IsEqual(7)
		}

		e.POST("/v1/models/unload").WithJSON(map[string]any{"id": "new"}).Expect().Status(200).JSON().Object().
			IsEqual(map[string]any{"id": "new", "loaded": false})
		e.POST("/v1/models/unload").WithJSON(map[string]any{"id": "new"}).Expect().Status(200).JSON().Object().Value("loaded").IsEqual(false)
		expectError(e.POST("/v1/models/unload").WithJSON(map[string]any{"id": "ghost"}).Expect(), 404, "not_found", "ghost")
		expectError(e.POST("/v1/models/unload").WithJSON(map[string]any{}).Expect(), 400, "invalid_request_error", "id")

		e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "input": "x"}).Expect().Status(200)
		um := e.POST("/v1/tasks/unload_models").WithJSON(map[string]any{"model_ids": []string{"tts", "asr", "ghost", "tts"}}).Expect().Status(200).JSON().Object()
		um.Value("not_found").Array().ConsistsOf("ghost")
		if v.parallel {
			um.Value("unloaded").Array().ConsistsOf("tts", "asr") // every known selected id, once
		} else {
			um.Value("unloaded").Array().ConsistsOf("tts") // only what was resident
		}
		expectError(e.POST("/v1/tasks/unload_models").WithJSON(map[string]any{"model_ids": "tts"}).Expect(), 400, "invalid_request_error", "model_ids")
		expectError(e.POST("/v1/tasks/unload_models").WithJSON(map[string]any{"model_ids": []any{1}}).Expect(), 400, "invalid_request_error", "model_ids")
		e.POST("/v1/tasks/unload_all_models").Expect().Status(200).JSON().Object().ContainsKey("unloaded")
	})
}

func TestManagementDisabled(t *testing.T) {
	v := variants[0]
	cfg := strings.Replace(fixtureConfig(t, v, ""), `"ui_management": true`, `"ui_management": false`, 1)
	e, _ := startServer(t, v, cfg)
	expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "n", "family": "fixture", "path": "p"}).Expect(), 403, "forbidden", "--ui-management")
	expectError(e.POST("/v1/models/unload").WithJSON(map[string]any{"id": "tts"}).Expect(), 403, "forbidden", "")
	e.POST("/v1/tasks/unload_all_models").Expect().Status(200)
}

func TestBusyIsServerBusy(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		ctl := fixture.Control("voice-a.bin")
		ctl.RunGate.Arm()
		done := make(chan struct{})
		go func() {
			defer close(done)
			http.Post(strings.TrimSuffix(e.GET("/health").Expect().Raw().Request.URL.String(), "/health")+"/v1/tasks/run", "application/json",
				strings.NewReader(`{"model":"tts","input":"x"}`))
		}()
		if !ctl.RunGate.WaitSeen(5 * time.Second) {
			t.Fatal("first request never reached the run gate")
		}
		expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "input": "x", "busy_timeout_ms": 50}).Expect(), 503, "server_busy", "")
		ctl.RunGate.Release()
		<-done
	})
}

// TestParityAcrossRuntimes runs one request script against every variant and
// requires identical responses once the top-level timing object is removed.
func TestParityAcrossRuntimes(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString(wavBytes(1600, 16000))
	script := []struct {
		path string
		body any
	}{
		{"/v1/audio/speech", map[string]any{"model": "tts", "input": "hello", "response_format": "json"}},
		{"/v1/audio/speech", map[string]any{"model": "tts", "input": "hello"}},
		{"/v1/tasks/run", map[string]any{"model": "asr", "audio_base64": b64}},
		{"/v1/audio/transcriptions/details", map[string]any{"model": "vad", "audio_base64": b64}},
		{"/v1/audio/transcriptions", map[string]any{"model": "asr", "audio_base64": b64}},
		{"/v1/tasks/run", map[string]any{"model": "ghost", "input": "x"}},
		{"/v1/tasks/run", map[string]any{"model": "asr"}},
		{"/v1/models/unload", map[string]any{"id": "asr"}},
		{"/v1/models/unload", map[string]any{"id": "ghost"}},
		{"/v1/models/unload", map[string]any{"id": "asr"}},
		{"/v1/tasks/unload_models", map[string]any{"model_ids": "asr"}},
		{"/v1/tasks/run", map[string]any{"model": "asr", "audio_base64": b64}},
	}
	var reference []string
	for _, v := range variants {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		var got []string
		for _, step := range script {
			r := e.POST(step.path).WithJSON(step.body).Expect()
			got = append(got, fmt.Sprintf("%d %s %s", r.Raw().StatusCode, r.Header("Content-Type").Raw(), withoutTiming(t, r.Body().Raw())))
		}
		if reference == nil {
			reference = got
			continue
		}
		for i := range got {
			if got[i] != reference[i] {
				t.Errorf("%s step %d (%s) differs from legacy:\n got  %.300s\n want %.300s", v.name, i, script[i].path, got[i], reference[i])
			}
		}
	}
}

// withoutTiming removes the top-level "timing" key of a JSON object body.
func withoutTiming(t *testing.T, body string) string {
	if !strings.HasPrefix(body, "{") {
		return body
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		t.Fatalf("bad JSON body %q: %v", body, err)
	}
	delete(obj, "timing")
	b, _ := json.Marshal(obj)
	return string(b)
}

// A load that fails because the request named a path that does not exist is
// the client's mistake (400); any other load failure stays a 500.
func TestLoadRouteMissingPathIs400(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		e, _ := startServer(t, v, fixtureConfig(t, v, ""))
		fixture.Control("missing.bin").FailLoad.Store(true)
		expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "m", "family": "fixture", "path": "/no/such/dir/missing.bin"}).Expect(),
			400, "invalid_request_error", "does not exist")
		existing := filepath.Join(t.TempDir(), "broken.bin")
		os.WriteFile(existing, []byte("x"), 0o644)
		fixture.Control("broken.bin").FailLoad.Store(true)
		expectError(e.POST("/v1/models/load").WithJSON(map[string]any{"id": "b", "family": "fixture", "path": existing}).Expect(),
			500, "server_error", "")
	})
}

func TestInputLengthLimit(t *testing.T) {
	e, _ := startServer(t, variants[0], fixtureConfig(t, variants[0], `, "max_input_chars": 5`))
	e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "héllo"}).Expect().Status(200)
	expectError(e.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": "hello!"}).Expect(), 413, "invalid_request_error", "max_input_chars (5)")
	expectError(e.POST("/v1/tasks/run").WithJSON(map[string]any{"model": "tts", "text": "hello!"}).Expect(), 413, "invalid_request_error", "max_input_chars")
	e2, _ := startServer(t, variants[0], fixtureConfig(t, variants[0], `, "max_input_chars": 0`))
	e2.POST("/v1/audio/speech").WithJSON(map[string]any{"model": "tts", "input": strings.Repeat("a", 200000)}).Expect().Status(200)
}
