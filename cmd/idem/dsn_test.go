package main

import "testing"

// TestRedactDSN: every form of DSN loses its password, and a URL whose
// password's end is not certain loses everything after the scheme.
func TestRedactDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		// SQLite paths: nothing to hide.
		{"", ""},
		{"orders.db", "orders.db"},
		{"/var/lib/idem/orders.db", "/var/lib/idem/orders.db"},
		{"sqlite:./data/orders.db", "sqlite:./data/orders.db"},
		{"/home/me/@work/orders.db", "/home/me/@work/orders.db"},

		// URLs.
		{"postgres://app:pw@db:5432/orders?sslmode=require", "postgres://app:xxxxx@db:5432/orders?sslmode=require"},
		{"postgresql://app@db/orders", "postgresql://app@db/orders"},
		{"postgres://app:p%40s%2Fs@db/orders", "postgres://app:xxxxx@db/orders"},
		{"postgres://app:@db/orders", "postgres://app:xxxxx@db/orders"},
		{"postgres://app:p@ss@db/orders", "postgres://app:xxxxx@db/orders"}, // the host follows the last @
		{"postgres://db/orders?user=app&password=pw&sslmode=disable", "postgres://db/orders?user=app&password=xxxxx&sslmode=disable"},
		{"postgres://db/orders?sslpassword=pw", "postgres://db/orders?sslpassword=xxxxx"},
		{"postgres://db/orders?pass%77ord=pw", "postgres://db/orders?pass%77ord=xxxxx"},
		{"postgres://app:pw@[::1]:5432/orders", "postgres://app:xxxxx@[::1]:5432/orders"},
		{"postgres://app:pw@db1:5432,db2:5432/orders", "postgres://app:xxxxx@db1:5432,db2:5432/orders"},
		{"mysql://app:pw@db:3306/orders?timeout=5s&tls=true", "mysql://app:xxxxx@db:3306/orders?timeout=5s&tls=true"},
		{"redis://:pw@cache:6379/0", "redis://:xxxxx@cache:6379/0"},

		// Malformed URLs: not shown.
		{"mysql://app:pw@db:port/orders", "mysql://xxxxx"},
		{"mysql://app:p%zzw@db/orders", "mysql://xxxxx"},
		{"mysql://app:p w@db/orders", "mysql://xxxxx"},
		{"postgresql://app:pw@[::1/orders", "postgresql://xxxxx"},
		// Ambiguous: an unencoded / ? or # ends the host early, and the
		// rest of the password follows it.
		{"postgres://app:12/pw@db/orders", "postgres://xxxxx"},
		{"mysql://app:12?pw@db/orders", "mysql://xxxxx"},
		{"mysql://app:12?x=pw@db/orders", "mysql://xxxxx"},
		{"postgres://app:12#pw@db/orders", "postgres://xxxxx"},
		{"postgres://app:pw@db/orders?application_name=me@example.com", "postgres://xxxxx"},

		// PostgreSQL key=value strings.
		{"host=db user=app password=pw dbname=orders", "host=db user=app password=xxxxx dbname=orders"},
		{"host=db password='p w\\' x' dbname=orders", "host=db password=xxxxx dbname=orders"},
		{"host=db password='unterminated dbname=orders", "host=db password=xxxxx"},
		{"host=db PASSWORD = pw sslmode=disable", "host=db PASSWORD = xxxxx sslmode=disable"},
		{"sslpassword=pw host=db", "sslpassword=xxxxx host=db"},

		// go-sql-driver/mysql DSNs.
		{"app:pw@tcp(db:3306)/orders?parseTime=true", "app:xxxxx@tcp(db:3306)/orders?parseTime=true"},
		{"app:p@ss@tcp(db)/orders", "app:xxxxx@tcp(db)/orders"},
		{"app:pw@/orders", "app:xxxxx@/orders"},
		{"app@unix(/run/mysqld.sock)/orders", "app@unix(/run/mysqld.sock)/orders"},
		{"9x://app:pw@h/orders", "9x:xxxxx@h/orders"},                         // a scheme begins with a letter
		{"app:pw@tcp(db)/orders?x=y://z", "app:xxxxx@tcp(db)/orders?x=y://z"}, // "app:pw@tcp(db)/orders?x=y" is no scheme
	} {
		if got := redactDSN(tc.dsn); got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
