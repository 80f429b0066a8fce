package httpapi

import (
	"bytes"
	"mime/multipart"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
)

// FuzzParseMultipart feeds arbitrary bodies to the multipart parser: it
// must never panic, and every failure must be a 400 with the envelope type.
func FuzzParseMultipart(f *testing.F) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	w.SetBoundary("XyZ")
	w.WriteField("model", "asr")
	fw, _ := w.CreateFormFile("file", "a.wav")
	fw.Write([]byte("RIFF....WAVEfmt "))
	w.Close()
	f.Add(buf.Bytes(), "multipart/form-data; boundary=XyZ")
	f.Add([]byte("--XyZ\r\n\r\n--XyZ--"), "multipart/form-data; boundary=XyZ")
	f.Add([]byte(""), "multipart/form-data; boundary=")
	f.Add([]byte("garbage"), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		frm, err := parseMultipart(body, contentType)
		if err != nil {
			if e := apierror.From(err); e.Status != 400 || e.Type != apierror.TypeInvalid {
				t.Fatalf("error is not a 400 invalid_request_error: %+v", e)
			}
			return
		}
		total := 0
		for _, u := range frm.files {
			total += len(u.data)
		}
		for _, vs := range frm.values {
			for _, v := range vs {
				total += len(v)
			}
		}
		if total > len(body) {
			t.Fatalf("parsed %d bytes of content from a %d-byte body", total, len(body))
		}
	})
}

func TestParseMultipartFields(t *testing.T) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	w.WriteField("model", "asr")
	w.WriteField("language", "en")
	fw, _ := w.CreateFormFile("file", "a.wav")
	fw.Write([]byte("abc"))
	w.Close()
	frm, err := parseMultipart(buf.Bytes(), w.FormDataContentType())
	if err != nil {
		t.Fatal(err)
	}
	if frm.value("model") != "asr" || frm.value("language") != "en" {
		t.Fatalf("values = %v", frm.values)
	}
	files := frm.filesOf("file")
	if len(files) != 1 || files[0].filename != "a.wav" || string(files[0].data) != "abc" {
		t.Fatalf("files = %+v", files)
	}
}
