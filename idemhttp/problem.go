package idemhttp

import (
	"encoding/json"
	"net/http"
)

// problem is an RFC 9457 problem details object with one extension member,
// code, that names the condition for programs.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// writeProblem writes an application/problem+json answer.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	body, err := json.Marshal(problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	})
	if err != nil { // cannot happen: every field is a string or an int
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	writeResponse(w, status, nil, body, nil)
}
