package mysql

import (
	"strconv"

	"github.com/idemkit/idem/dialect"
)

// The version bookkeeping as plain SQL, for migration tools
// (dialect.Scripter). The migration's name is an identifier-like file name
// part, safe inside a string literal.

var _ dialect.Scripter = (*mysqlDialect)(nil)

// RecordVersionSQL records m in the version table unless it is there.
func (*mysqlDialect) RecordVersionSQL(t dialect.Table, m dialect.Migration) string {
	return "INSERT INTO `" + t.Index("schema") + "` (version, name, applied_at) VALUES (" +
		strconv.Itoa(m.Version) + ", '" + m.Name + "', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version"
}

// ForgetVersionSQL removes the record of m.
func (*mysqlDialect) ForgetVersionSQL(t dialect.Table, m dialect.Migration) string {
	return "DELETE FROM `" + t.Index("schema") + "` WHERE version = " + strconv.Itoa(m.Version)
}

// DropVersionTableSQL drops the version table.
func (*mysqlDialect) DropVersionTableSQL(t dialect.Table) string {
	return "DROP TABLE IF EXISTS `" + t.Index("schema") + "`"
}
