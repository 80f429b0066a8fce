package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
)

// maxVoiceRefBytes bounds an inline base64 voice reference.
const maxVoiceRefBytes = 5 << 20

// decodeAudio turns uploaded WAV bytes into a clip within the audio limits.
func (s *Server) decodeAudio(what string, data []byte) (*audio.Clip, error) {
	if len(data) == 0 {
		return nil, apierror.Invalidf("%s is empty", what)
	}
	clip, err := audio.DecodeWAV(data, audio.Limits{MaxSeconds: s.cfg.MaxAudioSeconds})
	if err != nil {
		var e *apierror.Error
		if errors.As(err, &e) {
			return nil, &apierror.Error{Status: e.Status, Type: e.Type, Message: what + ": " + e.Message, Err: err}
		}
		return nil, apierror.Invalidf("%s: %v", what, err)
	}
	return clip, nil
}

// readLocalAudio reads a server-local file, allowed only under audio_roots.
func (s *Server) readLocalAudio(what, p string) ([]byte, error) {
	if len(s.cfg.AudioRoots) == 0 {
		return nil, apierror.Forbiddenf("%s: server-local audio paths are disabled; upload the file (multipart) or send it as base64, or list the folder in the config's audio_roots", what)
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(s.cfg.BaseDir, p)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, apierror.Invalidf("%s: file %q does not exist", what, p)
		}
		return nil, apierror.Invalidf("%s: cannot resolve %q: %v", what, p, err)
	}
	if !s.underAudioRoots(real) {
		return nil, apierror.Forbiddenf("%s: %q is outside the configured audio_roots", what, p)
	}
	st, err := os.Stat(real)
	if err != nil || !st.Mode().IsRegular() {
		return nil, apierror.Invalidf("%s: %q is not a regular file", what, p)
	}
	limit := s.cfg.MaxRequestBodyBytes
	if limit > 0 && st.Size() > limit {
		return nil, apierror.TooLargef("%s: %q is larger than max_request_body_bytes (%d bytes)", what, p, limit)
	}
	return os.ReadFile(real)
}

func (s *Server) underAudioRoots(real string) bool {
	for _, root := range s.cfg.AudioRoots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(r, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}

// jsonAudio finds the input audio of a JSON request: a server-local path in
// audio|audio_path|file, or audio_base64. It returns nil when there is none.
func (s *Server) jsonAudio(f fields) (*audio.Clip, error) {
	var path, pathKey string
	for _, key := range []string{"audio", "audio_path", "file"} {
		v, err := f.str(key)
		if err != nil {
			return nil, err
		}
		if v != "" {
			path, pathKey = v, key
			break
		}
	}
	b64, err := f.str("audio_base64")
	if err != nil {
		return nil, err
	}
	switch {
	case path != "" && b64 != "":
		return nil, apierror.Invalidf("send either %q or \"audio_base64\", not both", pathKey)
	case b64 != "":
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, apierror.Invalidf("audio_base64 is not valid base64: %v", err)
		}
		return s.decodeAudio("audio_base64", data)
	case path != "":
		data, err := s.readLocalAudio(pathKey, path)
		if err != nil {
			return nil, err
		}
		return s.decodeAudio(pathKey, data)
	}
	return nil, nil
}

// voiceRef reads voice_ref: a path string, {type:"path",path} or
// {type:"base64",data} (at most 5 MiB decoded).
func (s *Server) voiceRef(raw json.RawMessage) (*audio.Clip, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var p string
	if json.Unmarshal(raw, &p) == nil {
		if p == "" {
			return nil, nil
		}
		data, err := s.readLocalAudio("voice_ref", p)
		if err != nil {
			return nil, err
		}
		return s.decodeAudio("voice_ref", data)
	}
	var obj struct {
		Type string `json:"type"`
		Path string `json:"path"`
		Data string `json:"data"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, apierror.Invalidf("voice_ref must be a path string or an object {type, path|data}")
	}
	switch obj.Type {
	case "path":
		data, err := s.readLocalAudio("voice_ref", obj.Path)
		if err != nil {
			return nil, err
		}
		return s.decodeAudio("voice_ref", data)
	case "base64":
		if base64.StdEncoding.DecodedLen(len(obj.Data)) > maxVoiceRefBytes+3 {
			return nil, apierror.TooLargef("voice_ref data is larger than 5 MiB")
		}
		data, err := base64.StdEncoding.DecodeString(obj.Data)
		if err != nil {
			return nil, apierror.Invalidf("voice_ref data is not valid base64: %v", err)
		}
		if len(data) > maxVoiceRefBytes {
			return nil, apierror.TooLargef("voice_ref data is larger than 5 MiB")
		}
		return s.decodeAudio("voice_ref", data)
	}
	return nil, apierror.Invalidf("voice_ref type must be \"path\" or \"base64\", got %q", obj.Type)
}

// form is a parsed multipart body: text fields and uploaded files, all in
// memory (no temporary files, so a failed request leaves nothing behind).
type form struct {
	values map[string][]string
	files  []upload
}

type upload struct {
	field    string
	filename string
	data     []byte
}

func (f *form) value(key string) string {
	if v := f.values[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// maxParts bounds the number of parts in one multipart body.
const maxParts = 1024

// parseMultipart parses a multipart/form-data body with the boundary taken
// from contentType.
func parseMultipart(body []byte, contentType string) (*form, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return nil, apierror.Invalidf("malformed multipart Content-Type: %q", contentType)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	f := &form{values: map[string][]string{}}
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, apierror.Invalidf("malformed multipart body: %v", err)
		}
		if n >= maxParts {
			return nil, apierror.Invalidf("multipart body has more than %d parts", maxParts)
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return nil, apierror.Invalidf("malformed multipart body: %v", err)
		}
		name := part.FormName()
		if name == "" {
			continue
		}
		if fn := part.FileName(); fn != "" || name == "file" {
			f.files = append(f.files, upload{field: name, filename: fn, data: data})
			continue
		}
		f.values[name] = append(f.values[name], string(data))
	}
	return f, nil
}

// file returns the uploads of a field.
func (f *form) filesOf(field string) []upload {
	var out []upload
	for _, u := range f.files {
		if u.field == field {
			out = append(out, u)
		}
	}
	return out
}

// checkWavName accepts `.wav` or no extension.
func checkWavName(name string) error {
	ext := strings.ToLower(filepath.Ext(name))
	if ext != "" && ext != ".wav" {
		return apierror.Invalidf("file %q: only WAV uploads are supported (.wav or no extension)", name)
	}
	return nil
}

// reservedFormFields are the multipart fields the transcription routes read
// themselves; every other text field is passed to the model as an option.
var reservedFormFields = map[string]bool{"model": true, "file": true, "language": true, "prompt": true,
	"text": true, "busy_timeout_ms": true, "stream": true, "options": true}

// formOptions turns a multipart body's options into request fields: the
// `options` field (a JSON object) and any other text field as a string
// option, e.g. -F return_probabilities=true.
func formOptions(frm *form) (fields, error) {
	f := fields{}
	if v := frm.value("options"); v != "" {
		if !json.Valid([]byte(v)) {
			return nil, apierror.Invalidf("field \"options\" must be a JSON object")
		}
		f["options"] = json.RawMessage(v)
	}
	extra := map[string]json.RawMessage{}
	for k, vs := range frm.values {
		if reservedFormFields[k] || len(vs) == 0 {
			continue
		}
		b, _ := json.Marshal(vs[0])
		extra[k] = b
	}
	if len(extra) > 0 {
		var merged map[string]json.RawMessage
		if raw, ok := f["options"]; ok {
			if err := json.Unmarshal(raw, &merged); err != nil {
				return nil, apierror.Invalidf("field \"options\" must be a JSON object")
			}
		}
		if merged == nil {
			merged = map[string]json.RawMessage{}
		}
		for k, v := range extra {
			if _, set := merged[k]; !set {
				merged[k] = v
			}
		}
		b, _ := json.Marshal(merged)
		f["options"] = b
	}
	return f, nil
}
