package mysql

import (
	"database/sql/driver"
	"errors"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// Error numbers the dialect maps (MySQL and MariaDB share them).
const (
	erDupEntry            = 1062
	erLockDeadlock        = 1213
	erLockWaitTimeout     = 1205
	erLockNowait          = 3572
	erCheckRead           = 1020 // MariaDB snapshot isolation: record changed since read
	erReadOnlyTransaction = 1792
	erOptionPreventsStmt  = 1290 // --read-only server
	erNetPacketTooLarge   = 1153
	erDataTooLong         = 1406
	erTooBigRowsize       = 1118
	erWarnAllowedPacket   = 1301
	erTruncatedWrongValue = 1366
	erLongDataTooLarge    = 1210 // a prepared-statement parameter over max_allowed_packet
	erConCount            = 1040 // too many connections
	erUnknownCom          = 1047 // Galera: "WSREP has not yet prepared node for application use"
	erServerShutdown      = 1053
	erConnectionKilled    = 1927 // MariaDB
)

// Classify maps *mysql.MySQLError numbers and the driver's packet limit to
// the dialect meanings.
func (*Dialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	if errors.Is(err, mysqldriver.ErrPktTooLarge) {
		return dialect.Classified(dialect.ErrTooLarge, err)
	}
	var me *mysqldriver.MySQLError
	if !errors.As(err, &me) {
		if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldriver.ErrInvalidConn) || dialect.ConnectionLost(err) {
			return dialect.Classified(dialect.ErrUnavailable, err)
		}
		return err
	}
	switch me.Number {
	case erDupEntry:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	case erLockDeadlock:
		return dialect.Classified(dialect.ErrDeadlock, err)
	case erCheckRead:
		return dialect.Classified(dialect.ErrSerialization, err)
	case erLockWaitTimeout, erLockNowait:
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case erReadOnlyTransaction, erOptionPreventsStmt:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case erNetPacketTooLarge, erDataTooLong, erTooBigRowsize, erWarnAllowedPacket, erLongDataTooLarge:
		return dialect.Classified(dialect.ErrTooLarge, err)
	case erTruncatedWrongValue:
		return dialect.Classified(dialect.ErrInvalidValue, err)
	case erConCount, erUnknownCom, erServerShutdown, erConnectionKilled:
		return dialect.Classified(dialect.ErrUnavailable, err)
	}
	return err
}

func isNumber(err error, n uint16) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == n
}

// commitError: a server error, or driver.ErrBadConn (nothing was sent), is
// a known failure; any other error from COMMIT leaves the outcome unknown.
func commitError(err error) error {
	if err == nil {
		return nil
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) || errors.Is(err, driver.ErrBadConn) || dialect.IsClassified(err) {
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}
