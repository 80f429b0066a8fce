package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/session"
)

func (s *Server) health(x *exchange) error {
	return x.ok(orderedObject{
		{"status", "ok"},
		{"backend", s.cfg.Backend},
		{"models", len(s.rt.Models())},
		{"ui", false},
		{"ui_management", s.cfg.UIManagement},
	})
}

func truthy(v string) bool { return v == "true" || v == "1" }

func (s *Server) listModels(x *exchange) error {
	q := x.r.URL.Query()
	withOptions := truthy(q.Get("include_session_options"))
	withParams := truthy(q.Get("include_params"))
	data := []orderedObject{}
	for _, st := range s.rt.Models() {
		m := st.Model
		row := orderedObject{
			{"id", m.ID}, {"object", "model"}, {"owned_by", "engine"},
			{"family", m.Family}, {"task", string(m.Task)}, {"mode", string(m.Mode)},
		}
		if st.Slots != nil {
			var maxSlots any // null when unloaded
			if st.Slots.MaxParallelSlots != nil {
				maxSlots = *st.Slots.MaxParallelSlots
			}
			row = append(row,
				field{"slots", st.Slots.Configured},
				field{"active_slots", st.Slots.Active},
				field{"queued_requests", st.Slots.Queued},
				field{"max_parallel_slots", maxSlots})
		}
		row = append(row, field{"loaded", st.Loaded}, field{"path", m.Path})
		if withOptions {
			opts := m.SessionOptions
			if opts == nil {
				opts = map[string]string{}
			}
			row = append(row, field{"session_options", opts})
		}
		if withParams {
			row = append(row, field{"params", []any{}})
		}
		data = append(data, row)
	}
	return x.ok(orderedObject{{"object", "list"}, {"data", data}})
}

// voices lists preset names, the family's own voices and voice_dir stems.
func (s *Server) voices(x *exchange) error {
	id := x.r.URL.Query().Get("model")
	models := s.rt.Models()
	if id == "" && len(models) == 1 {
		id = models[0].Model.ID
	}
	set := map[string]bool{}
	if m, ok := s.rt.Lookup(id); ok {
		for name := range m.VoicePresets {
			set[name] = true
		}
		if fam, ok := session.Lookup(m.Family); ok {
			if vl, ok := fam.(session.VoiceLister); ok {
				names, err := vl.Voices(m.Spec())
				if err != nil {
					return err
				}
				for _, n := range names {
					set[n] = true
				}
			}
		}
		for _, n := range voiceDirStems(s.cfg.VoiceDir) {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return x.ok(orderedObject{{"voices", out}})
}

func voiceDirStems(dir string) []string {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".wav") {
			out = append(out, strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())))
		}
	}
	return out
}

func (s *Server) requireManagement() error {
	if !s.cfg.UIManagement {
		return apierror.Forbiddenf("model management is disabled: start the server with --ui-management (or ui_management: true in the config)")
	}
	return nil
}

func (s *Server) loadModel(x *exchange) error {
	if err := s.requireManagement(); err != nil {
		return err
	}
	body, err := x.body()
	if err != nil {
		return err
	}
	m, err := config.ParseModelJSON(body, s.cfg.BaseDir)
	if err != nil {
		return apierror.Invalidf("%v", err)
	}
	reconfigured, err := s.rt.Register(x.r.Context(), m)
	if err != nil {
		return loadRouteError(m, err)
	}
	return x.ok(orderedObject{{"id", m.ID}, {"loaded", true}, {"reconfigured", reconfigured}})
}

func (s *Server) unloadModel(x *exchange) error {
	if err := s.requireManagement(); err != nil {
		return err
	}
	var req struct {
		ID *string `json:"id"`
	}
	if err := x.decodeJSON(&req); err != nil {
		return err
	}
	if req.ID == nil || *req.ID == "" {
		return apierror.Invalidf("field \"id\" is required")
	}
	if err := s.rt.Unload(x.r.Context(), *req.ID); err != nil {
		return err
	}
	return x.ok(orderedObject{{"id", *req.ID}, {"loaded", false}})
}

func (s *Server) unloadModels(x *exchange) error {
	var req struct {
		ModelIDs json.RawMessage `json:"model_ids"`
	}
	if err := x.decodeJSON(&req); err != nil {
		return err
	}
	var ids []string
	if len(req.ModelIDs) == 0 || json.Unmarshal(req.ModelIDs, &ids) != nil || ids == nil {
		return apierror.Invalidf("field \"model_ids\" must be an array of model id strings")
	}
	unloaded, notFound, err := s.rt.UnloadModels(x.r.Context(), ids)
	if err != nil {
		return err
	}
	return x.ok(orderedObject{{"unloaded", nonNil(unloaded)}, {"not_found", nonNil(notFound)}})
}

func (s *Server) unloadAllModels(x *exchange) error {
	if _, err := x.body(); err != nil { // body optional and ignored
		return err
	}
	unloaded, err := s.rt.UnloadAll(x.r.Context())
	if err != nil {
		return err
	}
	return x.ok(orderedObject{{"unloaded", nonNil(unloaded)}})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// decodeJSON reads the body as one JSON object into v.
func (x *exchange) decodeJSON(v any) error {
	body, err := x.body()
	if err != nil {
		return err
	}
	return decodeObject(body, v)
}

func decodeObject(body []byte, v any) error {
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" {
		return apierror.Invalidf("request body must be a JSON object")
	}
	if trimmed[0] != '{' {
		return apierror.Invalidf("request body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return apierror.Invalidf("invalid JSON body: %v", err)
	}
	return nil
}

// loadRouteError turns a load failure caused by the request itself (a path
// that does not exist) into a 400; the C++ server answers 500 there.
func loadRouteError(m config.Model, err error) error {
	var e *apierror.Error
	if errors.As(err, &e) && e.Status != http.StatusInternalServerError {
		return err
	}
	if _, statErr := os.Stat(m.Path); statErr != nil && os.IsNotExist(statErr) {
		return apierror.Invalidf("model %q: path %q does not exist (relative paths resolve against %s): %v", m.ID, m.Path, filepath.Dir(m.Path), err)
	}
	return err
}
