package httpapi

import (
	"context"
	"encoding/base64"
	"slices"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

// speechTasks are the tasks /v1/audio/speech serves.
var speechTasks = []session.Task{"tts", "clon", "vdes"}

// audioTasks are the tasks that take input audio on the transcription routes.
var audioTasks = []session.Task{"asr", "vad", "diar", "align", "spk"}

// lease binds the caller to a session of model. Queued callers are not
// cancelled by a client disconnect: their finite work runs and the failed
// write is noticed afterwards (contract, section 3).
func (s *Server) lease(x *exchange, model string, busy *int64) (runtimes.Lease, error) {
	return s.rt.Acquire(context.WithoutCancel(x.r.Context()), model, busy)
}

// run executes req on the lease's session.
func run(x *exchange, l runtimes.Lease, req *session.Request, sink session.Sink) (*session.Result, error) {
	res, err := l.Session().Run(context.WithoutCancel(x.r.Context()), req, sink)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, apierror.Internalf("model %s returned no result", l.Model().ID)
	}
	return res, nil
}

func checkTask(m config.Model, allowed []session.Task, route string) error {
	if !slices.Contains(allowed, m.Task) {
		return apierror.Invalidf("model %q has task %q; %s needs a model with task %v", m.ID, m.Task, route, allowed)
	}
	return nil
}

// streamWithLease runs body inside an SSE (or raw) stream. The parallel
// runtime binds the lease before the headers (busy is a 503 envelope); the
// legacy runtime binds it inside the stream (busy is an SSE error after 200).
// check validates the model's configuration before the stream starts.
func (s *Server) streamWithLease(x *exchange, model string, busy *int64, check func(config.Model) error,
	start func() error, body func(l runtimes.Lease) error) error {
	if s.rt.LeaseBeforeStream() {
		l, err := s.lease(x, model, busy)
		if err != nil {
			return err
		}
		defer l.Release()
		if err := check(l.Model()); err != nil {
			return err
		}
		if err := start(); err != nil {
			return err
		}
		return body(l)
	}
	m, ok := s.rt.Lookup(model)
	if !ok {
		return runtimes.UnknownModel(model)
	}
	if err := check(m); err != nil {
		return err
	}
	if err := start(); err != nil {
		return err
	}
	l, err := s.lease(x, model, busy)
	if err != nil {
		return err
	}
	defer l.Release()
	return body(l)
}

// ---- /v1/audio/speech ----

func (s *Server) speech(x *exchange) error {
	body, err := x.body()
	if err != nil {
		return err
	}
	f, err := parseFields(body)
	if err != nil {
		return err
	}
	model, err := f.required("model")
	if err != nil {
		return err
	}
	input, err := f.required("input")
	if err != nil {
		return err
	}
	if err := checkInputLength("input", input, s.cfg.MaxInputChars); err != nil {
		return err
	}
	busy, err := f.busyTimeout()
	if err != nil {
		return err
	}
	format, err := f.str("response_format")
	if err != nil {
		return err
	}
	streamFlag, err := f.boolish("stream")
	if err != nil {
		return err
	}
	stream := streamFlag || f.has("stream_format")
	streamFormat := "sse"
	if f.has("stream_format") {
		if streamFormat, err = f.str("stream_format"); err != nil {
			return err
		}
	}
	if stream {
		if format != "pcm" {
			return apierror.Invalidf("streaming speech needs response_format \"pcm\"")
		}
		if streamFormat != "sse" && streamFormat != "audio" {
			return apierror.Invalidf("stream_format must be \"sse\" or \"audio\", got %q", streamFormat)
		}
	} else {
		switch format {
		case "", "wav", "json", "b64_json":
		case "pcm":
			return apierror.Invalidf("response_format \"pcm\" needs stream: true")
		default:
			return apierror.Invalidf("response_format must be wav, json or b64_json (or pcm with stream), got %q", format)
		}
	}
	build := func(m config.Model) (*session.Request, error) {
		req := &session.Request{Input: input, Stream: stream}
		if err := s.voiceFields(m, f, req); err != nil {
			return nil, err
		}
		return req, nil
	}
	if !stream {
		l, err := s.lease(x, model, busy)
		if err != nil {
			return err
		}
		defer l.Release()
		if err := checkTask(l.Model(), speechTasks, "/v1/audio/speech"); err != nil {
			return err
		}
		req, err := build(l.Model())
		if err != nil {
			return err
		}
		res, err := run(x, l, req, nil)
		if err != nil {
			return err
		}
		if res.Audio == nil {
			return apierror.Internalf("model %s produced no audio", model)
		}
		wall := time.Since(x.start)
		dur := res.Audio.Duration()
		x.setTimingHeaders(wall, dur)
		if format == "json" || format == "b64_json" {
			return x.ok(orderedObject{{"audio", wavBase64(res.Audio)}, {"format", "wav"}, {"timing", timing(wall, dur, true)}})
		}
		wav := audio.EncodeWAV(res.Audio)
		x.setHeader("Content-Type", "audio/wav")
		x.setHeader("Content-Length", itoa(len(wav)))
		x.writeHeader(200)
		return x.write(wav)
	}
	check := func(m config.Model) error {
		if err := checkTask(m, speechTasks, "/v1/audio/speech"); err != nil {
			return err
		}
		if m.Mode != session.ModeStreaming {
			return apierror.Invalidf("model %q is not a streaming model: send the request without stream", m.ID)
		}
		return nil
	}
	start := func() error {
		if streamFormat == "sse" {
			return x.startSSE()
		}
		x.setHeader("Content-Type", "application/octet-stream")
		x.writeHeader(200)
		x.rawStream = true
		return x.flush()
	}
	return s.streamWithLease(x, model, busy, check, start, func(l runtimes.Lease) error {
		req, err := build(l.Model())
		if err != nil {
			return err
		}
		var first time.Duration
		sink := session.SinkFunc(func(ev session.Event) error {
			if ev.Audio == nil || len(ev.Audio.Samples) == 0 {
				return nil
			}
			if first == 0 {
				first = time.Since(x.start)
			}
			pcm := audio.EncodePCM16(ev.Audio.Samples)
			if streamFormat == "audio" {
				if err := x.write(pcm); err != nil {
					return errClientGone
				}
				if err := x.flush(); err != nil {
					return errClientGone
				}
				return nil
			}
			if err := x.sseEvent(orderedObject{{"type", "speech.audio.delta"}, {"audio", base64.StdEncoding.EncodeToString(pcm)}}); err != nil {
				return errClientGone
			}
			return nil
		})
		if _, err := run(x, l, req, sink); err != nil {
			return err
		}
		if streamFormat == "audio" {
			return nil
		}
		if err := x.sseEvent(orderedObject{{"type", "speech.audio.done"}, {"timing", orderedObject{{"ttft_ms", ms(first)}}}}); err != nil {
			return nil
		}
		return x.sseDone()
	})
}

// applyVoicePreset resolves `voice` against the model's presets, and uses
// the default preset when the request names no voice at all.
func (s *Server) applyVoicePreset(m config.Model, req *session.Request, voiceGiven bool) error {
	var p *config.VoicePreset
	if req.Voice != "" && req.VoiceRef == nil {
		if preset, ok := m.VoicePresets[req.Voice]; ok {
			p = &preset
		}
	}
	if !voiceGiven && m.DefaultVoicePreset != nil {
		p = m.DefaultVoicePreset
	}
	if p == nil {
		return nil
	}
	req.Voice = p.VoiceID
	if p.ReferenceText != "" && req.ReferenceText == "" {
		req.ReferenceText = p.ReferenceText
	}
	if p.VoiceRef != "" {
		clip, err := s.configAudio(p.VoiceRef)
		if err != nil {
			return err
		}
		req.VoiceRef = clip
	}
	return nil
}

// configAudio reads audio that the server's own config names (presets): not
// subject to audio_roots, since the operator wrote the path.
func (s *Server) configAudio(p string) (*audio.Clip, error) {
	data, err := readFile(p)
	if err != nil {
		return nil, apierror.Internalf("voice preset audio %q: %v", p, err)
	}
	return s.decodeAudio("voice preset "+p, data)
}

// ---- /v1/audio/transcriptions[/details] ----

// transcriptionInput is what either body form carries.
type transcriptionInput struct {
	model    string
	busy     *int64
	stream   bool
	language string
	prompt   string
	options  fields // options and typed fields (JSON only)
	clip     func() (*audio.Clip, error)
}

func (s *Server) parseTranscription(x *exchange) (*transcriptionInput, error) {
	body, err := x.body()
	if err != nil {
		return nil, err
	}
	in := &transcriptionInput{}
	ct := x.r.Header.Get("Content-Type")
	if hasBoundary(ct) {
		frm, err := parseMultipart(body, ct)
		if err != nil {
			return nil, err
		}
		if in.model = frm.value("model"); in.model == "" {
			return nil, apierror.Invalidf("field \"model\" is required")
		}
		files := frm.filesOf("file")
		if len(files) == 0 || len(files[0].data) == 0 {
			return nil, apierror.Invalidf("field \"file\" is required and must not be empty")
		}
		if err := checkWavName(files[0].filename); err != nil {
			return nil, err
		}
		in.language = frm.value("language")
		in.prompt = frm.value("prompt")
		if in.prompt == "" {
			in.prompt = frm.value("text")
		}
		if v := frm.value("busy_timeout_ms"); v != "" {
			if in.busy, err = parseBusyTimeout(v); err != nil {
				return nil, err
			}
		}
		if v, ok := frm.values["stream"]; ok {
			b, ok := parseBoolWord(v[0])
			if !ok {
				return nil, apierror.Invalidf("field \"stream\" must be true, false, 1 or 0")
			}
			in.stream = b
		}
		in.options, err = formOptions(frm)
		if err != nil {
			return nil, err
		}
		data := files[0].data
		in.clip = func() (*audio.Clip, error) { return s.decodeAudio("file", data) }
		return in, nil
	}
	f, err := parseFields(body)
	if err != nil {
		return nil, err
	}
	if in.model, err = f.required("model"); err != nil {
		return nil, err
	}
	if in.busy, err = f.busyTimeout(); err != nil {
		return nil, err
	}
	if in.stream, err = f.boolish("stream"); err != nil {
		return nil, err
	}
	if in.language, err = f.str("language"); err != nil {
		return nil, err
	}
	if in.prompt, err = f.str("text"); err != nil {
		return nil, err
	}
	in.options = f
	in.clip = func() (*audio.Clip, error) {
		clip, err := s.jsonAudio(f)
		if err == nil && clip == nil {
			err = apierror.Invalidf("no input audio: give a server-local path in \"audio\" (under audio_roots) or the WAV bytes in \"audio_base64\", or upload it as multipart field \"file\"")
		}
		return clip, err
	}
	return in, nil
}

func (in *transcriptionInput) request(m config.Model) (*session.Request, error) {
	opts, err := in.options.options(m.DefaultRequestOptions)
	if err != nil {
		return nil, err
	}
	clip, err := in.clip()
	if err != nil {
		return nil, err
	}
	return &session.Request{Input: in.prompt, Language: in.language, Audio: clip, Options: opts, Stream: in.stream}, nil
}

func (s *Server) transcriptions(details bool) handlerFunc {
	route := "/v1/audio/transcriptions"
	if details {
		route += "/details"
	}
	return func(x *exchange) error {
		in, err := s.parseTranscription(x)
		if err != nil {
			return err
		}
		if in.stream && details {
			return apierror.Invalidf("%s does not stream: send stream=false", route)
		}
		if !in.stream {
			l, err := s.lease(x, in.model, in.busy)
			if err != nil {
				return err
			}
			defer l.Release()
			if err := checkTask(l.Model(), audioTasks, route); err != nil {
				return err
			}
			req, err := in.request(l.Model())
			if err != nil {
				return err
			}
			res, err := run(x, l, req, nil)
			if err != nil {
				return err
			}
			wall := time.Since(x.start)
			dur := req.Audio.Duration()
			x.setTimingHeaders(wall, dur)
			o := orderedObject{{"text", res.Text}}
			if details {
				if res.Language != "" {
					o = append(o, field{"language", res.Language})
				}
				o = structured(o, res, true)
				o = extra(o, res)
			}
			return x.ok(append(o, field{"timing", timing(wall, dur, true)}))
		}
		check := func(m config.Model) error {
			if err := checkTask(m, audioTasks, route); err != nil {
				return err
			}
			if m.Mode != session.ModeStreaming {
				return apierror.Invalidf("model %q is not a streaming model: send stream=false", m.ID)
			}
			return nil
		}
		return s.streamWithLease(x, in.model, in.busy, check, x.startSSE, func(l runtimes.Lease) error {
			req, err := in.request(l.Model())
			if err != nil {
				return err
			}
			diar := l.Model().Task == session.TaskDiar
			var first time.Duration
			var turns []session.SpeakerTurn
			sink := session.SinkFunc(func(ev session.Event) error {
				if first == 0 {
					first = time.Since(x.start)
				}
				var err error
				switch {
				case diar && ev.SpeakerTurns != nil:
					turns = append(turns, ev.SpeakerTurns...)
					err = x.sseEvent(orderedObject{{"type", "diarization.delta"}, {"speaker_turns", ev.SpeakerTurns}, {"sample_rate", ev.SampleRate}})
				case ev.TextDelta != "":
					err = x.sseEvent(orderedObject{{"type", "transcript.text.delta"}, {"delta", ev.TextDelta}})
				}
				if err != nil {
					return errClientGone
				}
				return nil
			})
			res, err := run(x, l, req, sink)
			if err != nil {
				return err
			}
			var done orderedObject
			if diar {
				var ttft any
				if first > 0 {
					ttft = ms(first)
				}
				all := res.SpeakerTurns
				if all == nil {
					all = turns
				}
				done = orderedObject{{"type", "diarization.done"}, {"speaker_turns", all}, {"sample_rate", res.SampleRate}, {"timing", orderedObject{{"ttft_ms", ttft}}}}
			} else {
				done = orderedObject{{"type", "transcript.text.done"}, {"text", res.Text}, {"timing", orderedObject{{"ttft_ms", ms(first)}}}}
			}
			if err := x.sseEvent(done); err != nil {
				return nil
			}
			return x.sseDone()
		})
	}
}
