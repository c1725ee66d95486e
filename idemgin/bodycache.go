package idemgin

import (
	"bytes"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
)

// boundBody is the request body a gin middleware before the wrapped
// handler read with c.ShouldBindBodyWith, which drains c.Request.Body and
// keeps the bytes in c.Keys under gin.BodyBytesKey. Those bytes are the
// body: the middleware fingerprints them, and every run of the handler gets
// them, through c.Request.Body and through ShouldBindBodyWith's cache
// alike.
type boundBody struct {
	bytes []byte
	ok    bool // gin held the body bytes before the first run
}

// boundBodyOf returns the body bytes c holds, if a middleware bound the
// body with ShouldBindBodyWith. As in ShouldBindBodyWith, only a non-nil
// []byte counts.
func boundBodyOf(c *gin.Context) boundBody {
	v, _ := c.Get(gin.BodyBytesKey)
	b, ok := v.([]byte)
	return boundBody{bytes: b, ok: ok && b != nil}
}

// request returns r with the bound bytes as its body, in place of the body
// ShouldBindBodyWith drained, so that the middleware reads and fingerprints
// them; r itself when no body was bound, or the bound body is empty: a
// body drained before the binding (a form parsed first) is cached empty,
// and only r as it stands lets the middleware see that it had one. r must
// be a copy the wrapper owns.
func (b boundBody) request(r *http.Request) *http.Request {
	if !b.ok || len(b.bytes) == 0 {
		return r
	}
	r.Body = io.NopCloser(bytes.NewReader(b.bytes))
	r.ContentLength = int64(len(b.bytes))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.bytes)), nil }
	return r
}

// reset puts ShouldBindBodyWith's cache back as it was before the first
// run, so that each run sees the same bytes whatever an earlier run did: a
// copy of the bound bytes, or no cache, which a run that binds with
// ShouldBindBodyWith fills from its own fresh c.Request.Body.
func (b boundBody) reset(c *gin.Context) {
	if b.ok {
		c.Set(gin.BodyBytesKey, bytes.Clone(b.bytes))
		return
	}
	c.Delete(gin.BodyBytesKey)
}
