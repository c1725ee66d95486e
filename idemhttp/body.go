package idemhttp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"

	"github.com/idemkit/idem"
)

// payload is a protected request's body as its handler sees it: what is
// fingerprinted, and how each run of the handler gets it.
type payload struct {
	// body is what Config.Fingerprint gets: the body's bytes, or, when
	// form is set, the form's encoding (see formEncoding).
	body []byte
	// form: a middleware before this one parsed the form and so drained
	// r.Body; the handler gets r's own body and a fresh copy of the
	// parsed form on every run, as it would without the middleware.
	form bool
	// files holds the parsed form's files as a multipart body (with its
	// boundary), from which each run gets files of its own, in memory: a
	// run that removes them (MultipartForm.RemoveAll) or a temporary file
	// gone must not leave the next run without them.
	files    []byte
	boundary string
}

// runFiles returns fresh copies, in memory, of the files of a form parsed
// before the middleware; nil when it had none.
func (p payload) runFiles() (map[string][]*multipart.FileHeader, error) {
	if p.files == nil {
		return nil, nil
	}
	f, err := multipart.NewReader(bytes.NewReader(p.files), p.boundary).ReadForm(int64(len(p.files)) + 1)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: copy the form's files for a run: %w", err)
	}
	return f.File, nil
}

// errBodyConsumed is the failure of a protected request whose body a
// middleware before this one read (or closed) and did not restore.
var errBodyConsumed = errors.New("idemhttp: request body consumed before the middleware")

// readPayload reads r's body (at most limit bytes) and tells what the
// handler will see of it. A body that reads empty (or closed) while the
// request announced one was consumed before the middleware ran: when that
// was a form parse, the parsed form stands for it; otherwise it fails
// with errBodyConsumed, for nothing can say what the request asked.
func readPayload(w http.ResponseWriter, r *http.Request, limit int64) (payload, error) {
	body, err := readBody(w, r, limit)
	switch {
	case err != nil && !errors.Is(err, http.ErrBodyReadAfterClose):
		return payload{}, err
	case err == nil && len(body) > 0 && r.ContentLength > int64(len(body)) && !encoded(r):
		// net/http fails a body cut short by the client: what is missing
		// was read before the middleware, and the handler would not see it.
		return payload{}, fmt.Errorf("%w: %d of its %d bytes are left", errBodyConsumed, len(body), r.ContentLength)
	case err == nil && len(body) > 0:
		return payload{body: body}, nil
	case !announcesBody(r):
		return payload{body: []byte{}}, nil
	case parsedForm(r):
		enc, err := formEncoding(r, limit)
		if err != nil {
			return payload{}, err
		}
		p := payload{body: enc, form: true}
		if r.MultipartForm != nil && len(r.MultipartForm.File) > 0 {
			if p.files, p.boundary, err = encodeFiles(r.MultipartForm.File); err != nil {
				return payload{}, err
			}
		}
		return p, nil
	case err != nil:
		return payload{}, fmt.Errorf("%w: it was closed: %w", errBodyConsumed, err)
	}
	return payload{}, fmt.Errorf("%w: it reads empty, but the request announced one (Content-Length %d, Transfer-Encoding %q)", errBodyConsumed, r.ContentLength, r.TransferEncoding)
}

// encoded reports whether r's body is sent with a content coding (gzip,
// say): a middleware that decodes it may leave Content-Length as sent
// (echo's Decompress does), so the decoded body's length says nothing.
func encoded(r *http.Request) bool {
	ce := r.Header.Get("Content-Encoding")
	return ce != "" && ce != "identity"
}

// announcesBody reports whether r said it has a body: a Content-Length
// above 0, or a body of unknown length (-1: chunked, or HTTP/2 without a
// Content-Length; an HTTP/2 request without a body has 0).
func announcesBody(r *http.Request) bool {
	return r.ContentLength != 0 || slices.Contains(r.TransferEncoding, "chunked")
}

// parsedForm reports whether the form r's handler sees was parsed from
// its body before the middleware ran: a multipart form that
// ParseMultipartForm (or FormValue) read, or an url-encoded one that
// ParseForm read. net/http reads one for POST, PUT and PATCH only, and
// leaves PostForm empty for other methods; a method override in front
// may have parsed a POST's form and then changed the method, so for
// those a form with a value was parsed from the body too.
func parsedForm(r *http.Request) bool {
	if r.MultipartForm != nil {
		return !multipartByReader(r.MultipartForm)
	}
	if r.PostForm == nil {
		return false
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		if len(r.PostForm) == 0 {
			return false
		}
	}
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && ct == "application/x-www-form-urlencoded"
}

// multipartByReader reports whether f is net/http's sentinel for a body
// read part by part with Request.MultipartReader: the parts went to the
// caller, and f holds none of them. The sentinel is unexported; net/http
// tells it apart in ParseMultipartForm, which fails for it and returns
// early for any other parsed form, here on a throwaway request.
func multipartByReader(f *multipart.Form) bool {
	return (&http.Request{MultipartForm: f}).ParseMultipartForm(0) != nil
}

// formEncodingPrefix starts every form encoding; the version changes if
// the encoding ever does.
const formEncodingPrefix = "idemhttp form v1 sha256:"

// formEncoding is what stands for the body of a request whose form was
// parsed before the middleware: formEncodingPrefix and the hex SHA-256 of
// the form as idem.Hasher frames it, each part with its length:
//
//   - r.PostForm: its number of names, then, for each name in byte order,
//     the name, its number of values and each value in order;
//   - r.MultipartForm's Value, the same way (0 names without a multipart
//     form);
//   - r.MultipartForm's File: its number of names, then, for each name in
//     byte order, the name, its number of files and, for each file in
//     order, its filename, its Content-Type and its bytes.
//
// Numbers are decimal. The form's names, values and file sizes together
// may be at most limit bytes; a larger form fails with an
// *http.MaxBytesError, as a larger body does.
func formEncoding(r *http.Request, limit int64) ([]byte, error) {
	var (
		h    idem.Hasher
		size int64
	)
	grow := func(n int64) error {
		if size += n; size > limit {
			return &http.MaxBytesError{Limit: limit}
		}
		return nil
	}
	// counted: the values count towards limit (a multipart form's are
	// in its PostForm too, and count once).
	addValues := func(v map[string][]string, counted bool) error {
		h.AddString(strconv.Itoa(len(v)))
		for _, name := range slices.Sorted(maps.Keys(v)) {
			n := int64(len(name))
			for _, value := range v[name] {
				n += int64(len(value))
			}
			if counted {
				if err := grow(n); err != nil {
					return err
				}
			}
			h.AddString(name)
			h.AddString(strconv.Itoa(len(v[name])))
			for _, value := range v[name] {
				h.AddString(value)
			}
		}
		return nil
	}
	h.AddString("idemhttp form v1")
	if err := addValues(r.PostForm, r.MultipartForm == nil); err != nil {
		return nil, err
	}
	var mf multipart.Form
	if r.MultipartForm != nil {
		mf = *r.MultipartForm
	}
	if err := addValues(mf.Value, true); err != nil {
		return nil, err
	}
	h.AddString(strconv.Itoa(len(mf.File)))
	for _, name := range slices.Sorted(maps.Keys(mf.File)) {
		h.AddString(name)
		h.AddString(strconv.Itoa(len(mf.File[name])))
		for _, fh := range mf.File[name] {
			if err := grow(int64(len(fh.Filename)) + max(fh.Size, 0)); err != nil {
				return nil, err
			}
			content, err := fileBytes(fh)
			if err != nil {
				return nil, err
			}
			h.AddString(fh.Filename)
			h.AddString(fh.Header.Get("Content-Type"))
			h.Add(content)
		}
	}
	sum := h.Sum()
	return []byte(formEncodingPrefix + hex.EncodeToString(sum[:])), nil
}

// encodeFiles writes the files of a parsed multipart form, each with its
// part header, as a multipart body, and returns it with its boundary.
func encodeFiles(files map[string][]*multipart.FileHeader) ([]byte, string, error) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for _, fh := range files[name] {
			content, err := fileBytes(fh)
			if err != nil {
				return nil, "", err
			}
			part, err := mw.CreatePart(fh.Header)
			if err == nil {
				_, err = part.Write(content)
			}
			if err != nil {
				return nil, "", fmt.Errorf("idemhttp: copy the form's file %q: %w", fh.Filename, err)
			}
		}
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("idemhttp: copy the form's files: %w", err)
	}
	return b.Bytes(), mw.Boundary(), nil
}

// fileBytes reads a file part of a parsed multipart form, from memory or
// from its temporary file.
func fileBytes(fh *multipart.FileHeader) ([]byte, error) {
	f, err := fh.Open()
	if err != nil {
		return nil, fmt.Errorf("idemhttp: open the form's file %q: %w", fh.Filename, err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(f, max(fh.Size, 0))); err != nil {
		return nil, fmt.Errorf("idemhttp: read the form's file %q: %w", fh.Filename, err)
	}
	return b.Bytes(), nil
}

// bodyConsumed refuses a protected request whose body was consumed before
// the middleware (errBodyConsumed): 500 "body-consumed", nothing claimed,
// and an ERROR log naming the fix.
func (m *Middleware[TTx]) bodyConsumed(w http.ResponseWriter, r *http.Request, err error) {
	m.logger().LogAttrs(r.Context(), slog.LevelError, "idemhttp: refused a request whose body a middleware before this one read and did not restore (or, with an unknown length, that the client sent empty); after reading it, set r.Body = io.NopCloser(bytes.NewReader(body)), or install this middleware before that one",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
	detail := "The service is misconfigured: this request's body was read before its idempotency protection could see it. Nothing was done."
	if r.ContentLength < 0 {
		detail = "This request's body was read before its idempotency protection could see it, or it was sent empty with an unknown length (chunked), which cannot be told apart. Nothing was done. If the body is empty, send it with Content-Length: 0, or send none."
	}
	writeProblem(w, http.StatusInternalServerError, "body-consumed", detail)
}
