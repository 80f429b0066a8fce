package httpapi

import (
	"encoding/json"
	"os"
	"strconv"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

func itoa(n int) string { return strconv.Itoa(n) }

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// taskFields merges the top-level fields with the `request` object (the
// request object wins), and reads model and busy_timeout_ms.
func taskFields(body []byte) (f fields, model string, busy *int64, err error) {
	top, err := parseFields(body)
	if err != nil {
		return nil, "", nil, err
	}
	f = fields{}
	for k, v := range top {
		if k != "request" {
			f[k] = v
		}
	}
	if raw, ok := top["request"]; ok && !isNull(raw) {
		var inner fields
		if err := json.Unmarshal(raw, &inner); err != nil || inner == nil {
			return nil, "", nil, apierror.Invalidf("field \"request\" must be an object")
		}
		for k, v := range inner {
			f[k] = v
		}
	}
	if model, err = top.required("model"); err != nil {
		return nil, "", nil, err
	}
	if busy, err = top.busyTimeout(); err != nil {
		return nil, "", nil, err
	}
	if err := checkArtifacts(f["artifacts"]); err != nil {
		return nil, "", nil, err
	}
	return f, model, busy, nil
}

// checkArtifacts accepts an absent field or an array of {id, kind, payload}.
func checkArtifacts(raw json.RawMessage) error {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var items []struct {
		ID      *string `json:"id"`
		Kind    *string `json:"kind"`
		Payload *string `json:"payload"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return apierror.Invalidf("artifacts must be an array of {id, kind, payload} objects")
	}
	for i, it := range items {
		if it.ID == nil || it.Kind == nil || it.Payload == nil {
			return apierror.Invalidf("artifacts[%d] needs string fields id, kind and payload", i)
		}
	}
	return nil
}

// taskRequest builds a session request from generic task fields.
func (s *Server) taskRequest(m config.Model, f fields) (*session.Request, error) {
	req := &session.Request{}
	var err error
	if req.Input, err = f.str("input"); err != nil {
		return nil, err
	}
	if req.Input == "" {
		if req.Input, err = f.str("text"); err != nil {
			return nil, err
		}
	}
	if err := checkInputLength("input", req.Input, s.cfg.MaxInputChars); err != nil {
		return nil, err
	}
	if req.Audio, err = s.jsonAudio(f); err != nil {
		return nil, err
	}
	if err := s.voiceFields(m, f, req); err != nil {
		return nil, err
	}
	return req, nil
}

// voiceFields reads what speech and generic tasks share: language, voice,
// reference text and audio, options (over the model's defaults), and the
// model's voice presets.
func (s *Server) voiceFields(m config.Model, f fields, req *session.Request) error {
	var err error
	if req.Language, err = f.str("language"); err != nil {
		return err
	}
	if req.Voice, err = f.str("voice"); err != nil {
		return err
	}
	if req.ReferenceText, err = f.str("reference_text"); err != nil {
		return err
	}
	if req.Options, err = f.options(m.DefaultRequestOptions); err != nil {
		return err
	}
	if req.VoiceRef, err = s.voiceRef(f["voice_ref"]); err != nil {
		return err
	}
	return s.applyVoicePreset(m, req, f.has("voice") || f.has("voice_ref"))
}

// taskLease reads a generic task body, binds the lease and then builds the
// request from the leased model's configuration. The caller releases l.
func (s *Server) taskLease(x *exchange) (l runtimes.Lease, req *session.Request, err error) {
	body, err := x.body()
	if err != nil {
		return nil, nil, err
	}
	f, model, busy, err := taskFields(body)
	if err != nil {
		return nil, nil, err
	}
	if l, err = s.lease(x, model, busy); err != nil {
		return nil, nil, err
	}
	if req, err = s.taskRequest(l.Model(), f); err != nil {
		l.Release()
		return nil, nil, err
	}
	return l, req, nil
}

func (s *Server) taskRun(x *exchange) error {
	l, req, err := s.taskLease(x)
	if err != nil {
		return err
	}
	defer l.Release()
	res, err := run(x, l, req, nil)
	if err != nil {
		return err
	}
	wall := time.Since(x.start)
	o := runResult(res)
	if res.Audio != nil {
		x.setTimingHeaders(wall, res.Audio.Duration())
		o = append(o, field{"timing", timing(wall, res.Audio.Duration(), true)})
	} else {
		o = append(o, field{"timing", timing(wall, 0, false)})
	}
	return x.ok(o)
}

func (s *Server) taskStream(x *exchange) error {
	l, req, err := s.taskLease(x)
	if err != nil {
		return err
	}
	defer l.Release()
	req.Stream = true
	events := []orderedObject{}
	var first time.Duration
	sink := session.SinkFunc(func(ev session.Event) error {
		if first == 0 {
			first = time.Since(x.start)
		}
		var e orderedObject
		if ev.TextDelta != "" {
			e = append(e, field{"partial_text", orderedObject{{"text", ev.TextDelta}, {"language", req.Language}}})
		}
		if ev.Audio != nil {
			e = append(e, field{"audio", wavBase64(ev.Audio)})
		}
		if ev.SpeakerTurns != nil {
			e = append(e, field{"speaker_turns", ev.SpeakerTurns})
		}
		events = append(events, append(e, field{"is_final", false}))
		return nil
	})
	res, err := run(x, l, req, sink)
	if err != nil {
		return err
	}
	events = append(events, orderedObject{{"is_final", true}})
	var ttft any
	if first > 0 {
		ttft = ms(first)
	}
	result := append(runResult(res), field{"timing", orderedObject{{"ttft_ms", ttft}}})
	return x.ok(orderedObject{{"events", events}, {"result", result}})
}

// batchRun runs reqs as one native batch under one lease and streams each
// result as an SSE event (event type, then the fields that result gives);
// the lease is held until the last callback.
func (s *Server) batchRun(x *exchange, model string, busy *int64, build func(m config.Model) ([]*session.Request, error),
	event string, result func(i int, res *session.Result) orderedObject, doneEvent string) error {
	check := func(m config.Model) error {
		if m.Mode != session.ModeOffline {
			return apierror.Invalidf("model %q is not an offline model: batches need offline mode", m.ID)
		}
		return nil
	}
	return s.streamWithLease(x, model, busy, check, x.startSSE, func(l runtimes.Lease) error {
		bs, ok := l.Session().(session.BatchSession)
		if !ok {
			return apierror.Invalidf("model %q does not support native batching", model)
		}
		reqs, err := build(l.Model())
		if err != nil {
			return err
		}
		count := 0
		err = bs.RunBatch(x.r.Context(), reqs, func(i int, res *session.Result, err error) error {
			if err != nil {
				return err
			}
			count++
			if werr := x.sseEvent(append(orderedObject{{"type", event}}, result(i, res)...)); werr != nil {
				return errClientGone
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := x.sseEvent(orderedObject{{"type", doneEvent}, {"result_count", count}, {"timing", timing(time.Since(x.start), 0, false)}}); err != nil {
			return nil
		}
		return x.sseDone()
	})
}

func (s *Server) taskBatch(x *exchange) error {
	body, err := x.body()
	if err != nil {
		return err
	}
	top, err := parseFields(body)
	if err != nil {
		return err
	}
	model, err := top.required("model")
	if err != nil {
		return err
	}
	busy, err := top.busyTimeout()
	if err != nil {
		return err
	}
	var items []fields
	if err := json.Unmarshal(top["requests"], &items); err != nil || len(items) == 0 {
		return apierror.Invalidf("field \"requests\" must be a non-empty array of request objects")
	}
	build := func(m config.Model) ([]*session.Request, error) {
		reqs := make([]*session.Request, len(items))
		for i, it := range items {
			if it == nil {
				return nil, apierror.Invalidf("requests[%d] must be an object", i)
			}
			r, err := s.taskRequest(m, it)
			if err != nil {
				return nil, apierror.Invalidf("requests[%d]: %v", i, err)
			}
			reqs[i] = r
		}
		return reqs, nil
	}
	return s.batchRun(x, model, busy, build, "task.batch.result", func(i int, res *session.Result) orderedObject {
		return orderedObject{{"index", i}, {"result", append(runResult(res), field{"timing", nil})}}
	}, "task.batch.done")
}

func (s *Server) batchTranscriptions(x *exchange) error {
	body, err := x.body()
	if err != nil {
		return err
	}
	ct := x.r.Header.Get("Content-Type")
	if !hasBoundary(ct) {
		return apierror.Invalidf("/v1/batches/transcriptions needs a multipart/form-data body")
	}
	frm, err := parseMultipart(body, ct)
	if err != nil {
		return err
	}
	model := frm.value("model")
	if model == "" {
		return apierror.Invalidf("field \"model\" is required")
	}
	files := frm.filesOf("file")
	if len(files) == 0 {
		return apierror.Invalidf("field \"file\" is required (repeat it for each file)")
	}
	for _, u := range files {
		if len(u.data) == 0 {
			return apierror.Invalidf("file %q is empty", u.filename)
		}
		if err := checkWavName(u.filename); err != nil {
			return err
		}
	}
	var busy *int64
	if v := frm.value("busy_timeout_ms"); v != "" {
		if busy, err = parseBusyTimeout(v); err != nil {
			return err
		}
	}
	opts, err := formOptions(frm)
	if err != nil {
		return err
	}
	build := func(m config.Model) ([]*session.Request, error) {
		o, err := opts.options(m.DefaultRequestOptions)
		if err != nil {
			return nil, err
		}
		reqs := make([]*session.Request, len(files))
		for i, u := range files {
			clip, err := s.decodeAudio("file "+u.filename, u.data)
			if err != nil {
				return nil, err
			}
			reqs[i] = &session.Request{Input: frm.value("prompt"), Language: frm.value("language"), Audio: clip, Options: o}
		}
		return reqs, nil
	}
	return s.batchRun(x, model, busy, build, "batch.transcription.result", func(i int, res *session.Result) orderedObject {
		o := orderedObject{{"index", i}, {"filename", files[i].filename}, {"text", res.Text}}
		if res.Language != "" {
			o = append(o, field{"language", res.Language})
		}
		return structured(o, res, true)
	}, "batch.transcription.done")
}
