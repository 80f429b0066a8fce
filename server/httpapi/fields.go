package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/audioproof/audioproof/server/apierror"
)

// fields is a request's JSON object, read key by key so that a wrong type
// is a 400 that names the field.
type fields map[string]json.RawMessage

func parseFields(body []byte) (fields, error) {
	var f fields
	if err := decodeObject(body, &f); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, apierror.Invalidf("request body must be a JSON object")
	}
	return f, nil
}

func (f fields) has(key string) bool {
	_, ok := f[key]
	return ok
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// str returns a string field ("" when absent or null).
func (f fields) str(key string) (string, error) {
	raw, ok := f[key]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", apierror.Invalidf("field %q must be a string", key)
	}
	return s, nil
}

// required returns a non-empty string field.
func (f fields) required(key string) (string, error) {
	s, err := f.str(key)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", apierror.Invalidf("field %q is required", key)
	}
	return s, nil
}

// boolish reads true/false, or the strings "true","1","false","0".
func (f fields) boolish(key string) (bool, error) {
	raw, ok := f[key]
	if !ok || isNull(raw) {
		return false, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if v, ok := parseBoolWord(s); ok {
			return v, nil
		}
	}
	return false, apierror.Invalidf("field %q must be a boolean", key)
}

func parseBoolWord(s string) (bool, bool) {
	switch s {
	case "true", "True", "1":
		return true, true
	case "false", "False", "0":
		return false, true
	}
	return false, false
}

// busyTimeout reads busy_timeout_ms: an integer >= 0, nil when absent.
func (f fields) busyTimeout() (*int64, error) {
	raw, ok := f["busy_timeout_ms"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	return parseBusyTimeout(strings.TrimSpace(string(raw)))
}

func parseBusyTimeout(s string) (*int64, error) {
	s = strings.Trim(s, `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return nil, apierror.Invalidf("busy_timeout_ms must be an integer >= 0, got %s", s)
	}
	return &n, nil
}

// scalar stringifies a JSON scalar the way options are passed to families.
func scalar(key string, raw json.RawMessage) (string, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "", apierror.Invalidf("option %q has no value", key)
	}
	switch t[0] {
	case '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return "", apierror.Invalidf("option %q: %v", key, err)
		}
		return s, nil
	case '{', '[':
		return "", apierror.Invalidf("option %q must be a string, number or boolean", key)
	case 'n':
		return "", apierror.Invalidf("option %q must not be null", key)
	}
	return string(t), nil
}

// typedOptions are request fields that become family options, by option name.
var typedOptions = []struct{ field, option string }{
	{"seed", "seed"}, {"temperature", "temperature"}, {"top_k", "top_k"}, {"top_p", "top_p"},
	{"max_tokens", "max_tokens"}, {"max_steps", "max_steps"}, {"repetition_penalty", "repetition_penalty"},
	{"guidance_scale", "guidance_scale"}, {"num_inference_steps", "num_inference_steps"},
	{"instructions", "instruction"}, {"speed", "speed"}, {"speaking_rate", "speed"},
}

// options merges the model's default_request_options, the request's
// `options` object and the typed sampling fields (later wins).
func (f fields) options(defaults map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(defaults)+4)
	for k, v := range defaults {
		out[k] = v
	}
	if raw, ok := f["options"]; ok && !isNull(raw) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, apierror.Invalidf("field \"options\" must be an object")
		}
		for k, v := range obj {
			s, err := scalar(k, v)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
	}
	for _, t := range typedOptions {
		raw, ok := f[t.field]
		if !ok || isNull(raw) {
			continue
		}
		s, err := scalar(t.field, raw)
		if err != nil {
			return nil, err
		}
		if t.option == "speed" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v <= 0 {
				return nil, apierror.Invalidf("field %q must be a positive number, got %s", t.field, s)
			}
		}
		out[t.option] = s
	}
	return out, nil
}

// checkInputLength applies max_input_chars to a text input.
func checkInputLength(field, text string, limit int) error {
	if limit <= 0 {
		return nil
	}
	if n := utf8.RuneCountInString(text); n > limit {
		return apierror.TooLargef("field %q has %d characters; the limit is max_input_chars (%d): split the text or raise the limit in the config", field, n, limit)
	}
	return nil
}
