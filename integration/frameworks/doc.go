// Package frameworks holds the tests that run idemhttp's middleware inside
// web frameworks, the way their users install it: echo
// (github.com/labstack/echo/v4) through echo.WrapMiddleware. It lives in the
// integration module so that no framework reaches the library's module
// graph. idemgin_test.go runs idemgin (gin) on PostgreSQL.
package frameworks
