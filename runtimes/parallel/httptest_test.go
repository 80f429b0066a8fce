package parallel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/httpapi"
	"github.com/audioproof/audioproof/server/session"
)

// apiServer is the HTTP API over a parallel runtime on a loopback listener.
type apiServer struct {
	rt     *Runtime
	srv    *httpapi.Server
	url    string
	addr   string
	served chan error
	once   sync.Once
}

func startAPI(t *testing.T, edit func(*config.Config), models ...config.Model) *apiServer {
	t.Helper()
	var cfg *config.Config
	rt := newRuntime(t, func(c *config.Config) {
		if edit != nil {
			edit(c)
		}
		cfg = c
	}, models...)
	if err := rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(httpapi.Options{Config: cfg, Runtime: rt})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &apiServer{rt: rt, srv: srv, url: "http://" + l.Addr().String(), addr: l.Addr().String(), served: make(chan error, 1)}
	goT(t, func() { a.served <- srv.Serve(l) })
	t.Cleanup(func() { a.shutdown(t) })
	return a
}

// shutdown drains the server (once); the runtime's Close follows in the
// runtime's own cleanup, after every worker is gone.
func (a *apiServer) shutdown(t *testing.T) {
	a.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v\n%s", err, allStacks())
		}
		if err := <-a.served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}

// post sends JSON and returns the status and body.
func (a *apiServer) post(t *testing.T, path string, body any) (int, string) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	resp, err := client.Post(a.url+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// models returns GET /v1/models rows by id.
func (a *apiServer) models(t *testing.T) map[string]map[string]any {
	t.Helper()
	resp, err := client.Get(a.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, row := range list.Data {
		out[row["id"].(string)] = row
	}
	return out
}

// rawPost writes a POST over a raw connection and returns the connection
// with its reader positioned after the status line.
func (a *apiServer) rawPost(t *testing.T, path string, body any) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	data, _ := json.Marshal(body)
	c, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(data), data)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("status line: %v", err)
	}
	return c, br, strings.TrimSpace(line)
}

func streamingModel(id, file string, slots int) config.Model {
	m := fixtureModel(id, file, slots, 0)
	m.Mode = session.ModeStreaming
	return m
}

func speechStream(model string) map[string]any {
	return map[string]any{"model": model, "input": "hello", "stream": true, "response_format": "pcm"}
}

func TestDeferredStreamOwnership(t *testing.T) {
	for _, c := range capacities {
		for _, disconnect := range []bool{false, true} {
			t.Run(fmt.Sprintf("slots=%d/disconnect=%v", c, disconnect), func(t *testing.T) {
				m := streamingModel("m", fileName(t, "a"), c)
				a := startAPI(t, nil, m)
				cm := ctl(t, m)
				if code, body := a.post(t, "/v1/audio/speech", speechStream("m")); code != 200 || !strings.Contains(body, "[DONE]") {
					t.Fatalf("warm stream: %d %s", code, body)
				}
				cm.RunGate.Arm()
				conn, br, status := a.rawPost(t, "/v1/audio/speech", speechStream("m"))
				if !strings.Contains(status, "200") {
					t.Fatalf("stream status %q", status)
				}
				eventually(t, "stream running", func() bool { return cm.Running() == 1 })
				if disconnect {
					conn.Close()
				}
				unloaded := make(chan struct{})
				goT(t, func() {
					if code, body := a.post(t, "/v1/models/unload", map[string]any{"id": "m"}); code != 200 {
						t.Errorf("unload: %d %s", code, body)
					}
					close(unloaded)
				})
				waitQueue(t, a.rt, "m", 0, 1)
				time.Sleep(20 * time.Millisecond)
				select {
				case <-unloaded:
					t.Fatal("unload finished while the stream held its lease")
				default:
				}
				if row := a.models(t)["m"]; row["active_slots"].(float64) != 1 || row["loaded"] != true {
					t.Fatalf("during stream: %v", row)
				}
				cm.RunGate.Release()
				if !disconnect {
					rest, _ := io.ReadAll(br)
					if !strings.Contains(string(rest), "[DONE]") {
						t.Fatalf("stream did not complete: %q", rest)
					}
					conn.Close()
				}
				<-unloaded
				if cm.Sessions.Load() != 0 || cm.Runs.Load() != 2 {
					t.Fatalf("after the stream: %d live sessions, %d runs", cm.Sessions.Load(), cm.Runs.Load())
				}
				checkDrained(t, a.rt)
			})
		}
	}
}

func TestStreamBusyIsJSONBeforeHeaders(t *testing.T) {
	m := streamingModel("m", fileName(t, "a"), 1)
	a := startAPI(t, nil, m)
	cm := ctl(t, m)
	cm.RunGate.Arm()
	go a.post(t, "/v1/audio/speech", speechStream("m"))
	eventually(t, "running", func() bool { return cm.Running() == 1 })
	req := speechStream("m")
	req["busy_timeout_ms"] = 20
	code, body := a.post(t, "/v1/audio/speech", req)
	if code != 503 || !strings.Contains(body, `"server_busy"`) {
		t.Fatalf("busy stream: %d %s, want a 503 envelope before any header", code, body)
	}
	cm.RunGate.Release()
}

func batchBody(model string, n int) map[string]any {
	reqs := make([]map[string]any, n)
	for i := range reqs {
		reqs[i] = map[string]any{"input": fmt.Sprint("item", i)}
	}
	return map[string]any{"model": model, "requests": reqs}
}

func TestDeferredBatchOwnership(t *testing.T) {
	for _, c := range capacities {
		t.Run(fmt.Sprintf("slots=%d", c), func(t *testing.T) {
			m := fixtureModel("m", fileName(t, "a"), c, 0)
			a := startAPI(t, nil, m)
			cm := ctl(t, m)
			cm.RunGate.Arm()
			batchDone := make(chan string, 1)
			goT(t, func() {
				code, body := a.post(t, "/v1/tasks/batch", batchBody("m", 3))
				batchDone <- fmt.Sprint(code, " ", body)
			})
			eventually(t, "batch running", func() bool { return cm.Running() == 1 })
			reconfigured := make(chan struct{})
			goT(t, func() {
				b := map[string]any{"id": "m", "path": "/models/" + fileName(t, "b"), "family": "fixture", "slots": c}
				if code, body := a.post(t, "/v1/models/load", b); code != 200 || !strings.Contains(body, `"reconfigured":true`) {
					t.Errorf("reconfigure: %d %s", code, body)
				}
				close(reconfigured)
			})
			waitQueue(t, a.rt, "m", 0, 1)
			cm.RunGate.Release()
			res := <-batchDone
			if !strings.HasPrefix(res, "200") || strings.Count(res, "task.batch.result") != 3 || !strings.Contains(res, "task.batch.done") {
				t.Fatalf("batch: %s", res)
			}
			<-reconfigured
			if cm.Runs.Load() != 3 || cm.Sessions.Load() != 0 {
				t.Fatalf("runs %d, live sessions %d", cm.Runs.Load(), cm.Sessions.Load())
			}
			ctl(t, fixtureModel("m", fileName(t, "b"), 1, 0)).ReleaseAll()
			checkDrained(t, a.rt)
		})
	}
}

func TestGenericBatchesHoldIndependentSlots(t *testing.T) {
	m := fixtureModel("m", fileName(t, "a"), 2, 0)
	a := startAPI(t, nil, m)
	cm := ctl(t, m)
	cm.RunGate.Arm()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		goT(t, func() {
			defer wg.Done()
			if code, body := a.post(t, "/v1/tasks/batch", batchBody("m", 2)); code != 200 {
				t.Errorf("batch: %d %s", code, body)
			}
		})
	}
	eventually(t, "two batches running at once", func() bool { return cm.Running() == 2 })
	if row := a.models(t)["m"]; row["active_slots"].(float64) != 2 {
		t.Fatalf("active_slots %v", row["active_slots"])
	}
	cm.RunGate.Release()
	wg.Wait()
	checkDrained(t, a.rt)
}

func TestGenericBatchSingleSlotAndInvalidInput(t *testing.T) {
	m := fixtureModel("m", fileName(t, "a"), 1, 0)
	a := startAPI(t, nil, m)
	if code, body := a.post(t, "/v1/tasks/batch", batchBody("m", 3)); code != 200 || strings.Count(body, "task.batch.result") != 3 {
		t.Fatalf("batch: %d %s", code, body)
	}
	if code, body := a.post(t, "/v1/tasks/batch", map[string]any{"model": "m", "requests": []any{}}); code != 400 {
		t.Fatalf("empty batch: %d %s", code, body)
	}
	if code, body := a.post(t, "/v1/tasks/batch", map[string]any{"model": "m", "requests": []any{"x"}}); code/100 != 4 {
		t.Fatalf("invalid item: %d %s", code, body)
	}
	checkDrained(t, a.rt)
	if code, _ := a.post(t, "/v1/tasks/batch", batchBody("m", 1)); code != 200 {
		t.Fatalf("slot not released after invalid input: %d", code)
	}
}

func TestAbandonedDeferredResponsesReleaseOwnership(t *testing.T) {
	for _, c := range capacities {
		t.Run(fmt.Sprintf("slots=%d", c), func(t *testing.T) {
			sm := streamingModel("s", fileName(t, "s"), c)
			bm := fixtureModel("b", fileName(t, "b"), c, 0)
			a := startAPI(t, nil, sm, bm)
			cs, cb := ctl(t, sm), ctl(t, bm)
			cs.RunGate.Arm()
			cb.RunGate.Arm()
			for i := 0; i < c; i++ {
				conn, _, st := a.rawPost(t, "/v1/audio/speech", speechStream("s"))
				if !strings.Contains(st, "200") {
					t.Fatalf("stream %q", st)
				}
				conn.Close()
				conn2, _, st2 := a.rawPost(t, "/v1/tasks/batch", batchBody("b", 2))
				if !strings.Contains(st2, "200") {
					t.Fatalf("batch %q", st2)
				}
				conn2.Close()
			}
			// The streams run on (gated); a batch whose client left may stop
			// between items. Either way every lease must come back.
			eventually(t, "abandoned streams running", func() bool { return cs.Running() == int64(c) })
			cs.RunGate.Release()
			cb.RunGate.Release()
			eventually(t, "leases released", func() bool {
				for _, st := range a.rt.Models() {
					if st.Slots.Active != 0 {
						return false
					}
				}
				return true
			})
			if code, _ := a.post(t, "/v1/tasks/unload_all_models", map[string]any{}); code != 200 {
				t.Fatal("unload all")
			}
			if cs.Sessions.Load() != 0 || cb.Sessions.Load() != 0 {
				t.Fatal("sessions left alive")
			}
			checkDrained(t, a.rt)
		})
	}
}

func TestListenerDrainsDisconnectedModelWork(t *testing.T) {
	for _, phase := range []string{"loading", "running", "reconfiguration", "unloading"} {
		t.Run(phase, func(t *testing.T) {
			m := fixtureModel("m", fileName(t, "a"), 2, 0)
			a := startAPI(t, nil, m)
			cm := ctl(t, m)
			b := fixtureModel("m", fileName(t, "b"), 2, 0)
			cb := ctl(t, b)
			defer cb.ReleaseAll()
			var gate interface {
				Release()
				WaitSeen(time.Duration) bool
			}
			var path string
			var body any
			switch phase {
			case "loading":
				cm.LoadGate.Arm()
				gate, path, body = &cm.LoadGate, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}
			case "running":
				cm.RunGate.Arm()
				gate, path, body = &cm.RunGate, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}
			case "reconfiguration":
				if code, _ := a.post(t, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}); code != 200 {
					t.Fatal("warm")
				}
				cb.LoadGate.Arm()
				gate, path, body = &cb.LoadGate, "/v1/models/load", map[string]any{"id": "m", "path": b.Path, "family": "fixture", "slots": 2}
			case "unloading":
				if code, _ := a.post(t, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}); code != 200 {
					t.Fatal("warm")
				}
				cm.CloseGate.Arm()
				gate, path, body = &cm.CloseGate, "/v1/models/unload", map[string]any{"id": "m"}
			}
			data, _ := json.Marshal(body)
			conn, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(data), data)
			if !gate.WaitSeen(2 * time.Second) {
				t.Fatalf("%s did not start", phase)
			}
			conn.Close() // the client goes away
			// A queued request behind the work is also abandoned.
			qconn, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := json.Marshal(map[string]any{"model": "m", "input": "q"})
			fmt.Fprintf(qconn, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(q), q)
			eventually(t, "queued request", func() bool {
				e, _ := a.rt.lookup("m")
				st := e.sched.stats()
				return st.queuedRequests == 1 || (phase == "loading" || phase == "running") && st.occupied == 2
			})
			qconn.Close()
			shut := make(chan struct{})
			goT(t, func() { a.shutdown(t); close(shut) })
			select {
			case <-shut:
				t.Fatalf("Shutdown returned while %s work was held", phase)
			case <-time.After(300 * time.Millisecond):
			}
			gate.Release()
			select {
			case <-shut:
			case <-time.After(10 * time.Second):
				t.Fatalf("Shutdown did not drain\n%s", allStacks())
			}
			// The runtime outlives every worker: nothing is held now.
			checkDrained(t, a.rt)
			if phase != "unloading" && cm.Runs.Load()+cb.Runs.Load() < 1 {
				t.Fatal("finite disconnected work did not run")
			}
		})
	}
}

func TestConcurrentJSONParsing(t *testing.T) {
	m := fixtureModel("m", fileName(t, "a"), 2, 0)
	a := startAPI(t, nil, m)
	bodies := []string{
		`{"id":"m","path":"/models/` + fileName(t, "a") + `","family":"fixture","slots":2}`,
		`{"id":"m","path":"/models/` + fileName(t, "a") + `","family":"fixture","slots":"2"}`,
		`{"id":"m","path":`,
		`{"id":"m","id":"m","path":"/x","family":"fixture"}`,
		`{"id":"m","path":"/models/` + fileName(t, "a") + `","family":"fixture","slots":17}`,
		`[1,2,3]`,
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		goT(t, func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				b := bodies[(g+i)%len(bodies)]
				resp, err := client.Post(a.url+"/v1/models/load", "application/json", strings.NewReader(b))
				if err != nil {
					t.Error(err)
					return
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := 400
				if b == bodies[0] {
					want = 200
				}
				if resp.StatusCode != want && !(want == 400 && resp.StatusCode == 500) {
					t.Errorf("%s: %d %s", b, resp.StatusCode, out)
				}
				if code, _ := a.post(t, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}); code != 200 {
					t.Errorf("speech during parsing: %d", code)
				}
			}
		})
	}
	wg.Wait()
	row := a.models(t)["m"]
	if row["loaded"] != true || row["slots"].(float64) != 2 {
		t.Fatalf("model after concurrent registrations: %v", row)
	}
	checkDrained(t, a.rt)
}

func TestModelsReportSlotFields(t *testing.T) {
	m := fixtureModel("m", fileName(t, "a"), 4, 0)
	n := fixtureModel("n", fileName(t, "n"), -1, 0)
	a := startAPI(t, nil, m, n)
	rows := a.models(t)
	for _, id := range []string{"m", "n"} {
		row := rows[id]
		for _, k := range []string{"loaded", "slots", "active_slots", "queued_requests", "max_parallel_slots"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("%s: no %s in %v", id, k, row)
			}
		}
		if row["max_parallel_slots"] != nil || row["loaded"] != false {
			t.Fatalf("%s unloaded: %v", id, row)
		}
	}
	if rows["n"]["slots"].(float64) != 1 {
		t.Fatalf("absent slots reported as %v, want 1", rows["n"]["slots"])
	}
	cm := ctl(t, m)
	cm.RunGate.Arm()
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		goT(t, func() { defer wg.Done(); a.post(t, "/v1/audio/speech", map[string]any{"model": "m", "input": "x"}) })
	}
	eventually(t, "4 running, 2 queued", func() bool {
		row := a.models(t)["m"]
		return row["active_slots"].(float64) == 4 && row["queued_requests"].(float64) == 2
	})
	if row := a.models(t)["m"]; row["max_parallel_slots"].(float64) != 4 || row["loaded"] != true {
		t.Fatalf("loaded: %v", row)
	}
	cm.RunGate.Release()
	wg.Wait()
	eventually(t, "counters back to zero on /v1/models", func() bool {
		row := a.models(t)["m"]
		return row["active_slots"].(float64) == 0 && row["queued_requests"].(float64) == 0
	})
}

// multiFileStep builds a multipart body with the file repeated n times.
func multiFileBody(t *testing.T, model string, n int) (string, []byte) {
	t.Helper()
	wav, err := os.ReadFile(filepath.Join(repoRoot(), "testdata", "vad", "silence_16k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("model", model)
	for i := 0; i < n; i++ {
		fw, _ := w.CreateFormFile("file", fmt.Sprintf("f%d.wav", i))
		_, _ = fw.Write(wav)
	}
	_ = w.Close()
	return w.FormDataContentType(), buf.Bytes()
}

func TestDeferredMultipartBatchOwnership(t *testing.T) {
	for _, c := range capacities {
		t.Run(fmt.Sprintf("slots=%d", c), func(t *testing.T) {
			m := fixtureModel("asr", fileName(t, "a"), c, 0)
			m.Task = session.TaskASR
			a := startAPI(t, nil, m)
			cm := ctl(t, m)
			cm.RunGate.Arm()
			ctype, body := multiFileBody(t, "asr", 3)
			batchDone := make(chan string, 1)
			goT(t, func() {
				resp, err := client.Post(a.url+"/v1/batches/transcriptions", ctype, bytes.NewReader(body))
				if err != nil {
					batchDone <- err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				batchDone <- fmt.Sprint(resp.StatusCode, " ", string(b))
			})
			eventually(t, "batch running", func() bool { return cm.Running() == 1 })
			unloaded := make(chan struct{})
			goT(t, func() {
				if code, body := a.post(t, "/v1/models/unload", map[string]any{"id": "asr"}); code != 200 {
					t.Errorf("unload: %d %s", code, body)
				}
				close(unloaded)
			})
			waitQueue(t, a.rt, "asr", 0, 1)
			select {
			case <-unloaded:
				t.Fatal("unload overtook the batch")
			case <-time.After(20 * time.Millisecond):
			}
			cm.RunGate.Release()
			if res := <-batchDone; !strings.HasPrefix(res, "200") || strings.Count(res, "batch.transcription.result") != 3 {
				t.Fatalf("batch: %s", res)
			}
			<-unloaded
			if cm.Sessions.Load() != 0 {
				t.Fatal("sessions alive after unload")
			}
			checkDrained(t, a.rt)
		})
	}
}

func TestRejectedPreparationReleasesLeaseOverHTTP(t *testing.T) {
	m := fixtureModel("asr", fileName(t, "a"), 2, 0)
	m.Task = session.TaskASR
	a := startAPI(t, nil, m)
	ctl(t, m).FailPrepare.Store(true)
	ctype, body := multiFileBody(t, "asr", 1)
	for i := 0; i < 4; i++ {
		resp, err := client.Post(a.url+"/v1/audio/transcriptions", ctype, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "invalid_request_error") {
			t.Fatalf("rejected preparation: %d %s", resp.StatusCode, b)
		}
	}
	checkDrained(t, a.rt)
	ctl(t, m).FailPrepare.Store(false)
	if code, body := a.post(t, "/v1/tasks/unload_all_models", nil); code != 200 {
		t.Fatalf("unload all: %d %s", code, body)
	}
}

func TestRegistrationIsVisibleInHealthWhileLoading(t *testing.T) {
	a := startAPI(t, nil)
	x := fixtureModel("x", fileName(t, "x"), 2, 0)
	cx := ctl(t, x)
	defer cx.ReleaseAll()
	cx.LoadGate.Arm()
	done := make(chan string, 1)
	goT(t, func() {
		code, body := a.post(t, "/v1/models/load", map[string]any{"id": "x", "path": x.Path, "family": "fixture", "slots": 2})
		done <- fmt.Sprint(code, " ", body)
	})
	if !cx.LoadGate.WaitSeen(2 * time.Second) {
		t.Fatal("load did not start")
	}
	resp, err := client.Get(a.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h["models"].(float64) != 1 {
		t.Fatalf("/health while loading: %v", h)
	}
	if row := a.models(t)["x"]; row["loaded"] != false || row["max_parallel_slots"] != nil {
		t.Fatalf("/v1/models while loading: %v", row)
	}
	cx.LoadGate.Release()
	if res := <-done; !strings.HasPrefix(res, "200") || !strings.Contains(res, `"loaded":true`) {
		t.Fatalf("load: %s", res)
	}
}

func TestShutdownInterruptsStalledClients(t *testing.T) {
	for _, stall := range []string{"headers", "body"} {
		t.Run(stall, func(t *testing.T) {
			m := fixtureModel("m", fileName(t, "a"), 1, 0)
			a := startAPI(t, nil, m)
			c, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if stall == "headers" { // never finishes its headers
				fmt.Fprintf(c, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
			} else { // never sends the body it announced
				fmt.Fprintf(c, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
			}
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			a.shutdown(t)
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("Shutdown took %v with a client stalled in its %s", el, stall)
			}
			checkDrained(t, a.rt)
		})
	}
}
