// Package frameworks holds the tests that run idemhttp's middleware inside
// web frameworks, the way their users install it: echo
// (github.com/labstack/echo/v4) through echo.WrapMiddleware, the pitfall
// (echo_test.go), and through idemecho, its fix (idemecho_test.go, on
// PostgreSQL). It lives in the integration module so that no framework
// reaches the library's module graph.
package frameworks
