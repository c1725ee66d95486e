// Package frameworks holds the tests that run idemhttp's middleware inside
// web frameworks, the way their users install it: echo
// (github.com/labstack/echo/v4) through echo.WrapMiddleware, the pitfall
// (echo_test.go), and through idemecho, its fix (idemecho_test.go); gin
// through idemgin (idemgin_test.go); connect through idemconnect
// (idemconnect_test.go); chi's With, Group and top-level Use (chi_test.go).
// The adapters' tests run on PostgreSQL. It lives in the integration
// module so that no framework reaches the library's module graph.
package frameworks
