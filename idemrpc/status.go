package idemrpc

import (
	"encoding/binary"
	"fmt"
)

// Code returns what an answer says happened: OK and "" for a message, and
// for an error the code and message of its google.rpc.Status. It reads the
// Status's protobuf encoding itself (fields 1, code, and 2, message; the
// details are skipped), so that a tool without gRPC or protobuf, such as
// the idem command, can tell a stored error from a success. Its errors
// match ErrCorruptAnswer.
func (a Answer) Code() (Code, string, error) {
	if a.Status == nil {
		return OK, "", nil
	}
	var (
		code Code
		msg  string
	)
	b := a.Status
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, "", fmt.Errorf("%w: status: bad field tag", ErrCorruptAnswer)
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		switch wire {
		case 0: // varint
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return 0, "", fmt.Errorf("%w: status: bad varint in field %d", ErrCorruptAnswer, field)
			}
			b = b[n:]
			if field == 1 {
				code = Code(uint32(v)) //nolint:gosec // an int32 on the wire: its low 32 bits
			}
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) { //nolint:gosec // n > 0
				return 0, "", fmt.Errorf("%w: status: bad length in field %d", ErrCorruptAnswer, field)
			}
			if field == 2 {
				msg = string(b[n : n+int(l)]) //nolint:gosec // l <= len(b)-n
			}
			b = b[n+int(l):] //nolint:gosec // l <= len(b)-n
		case 1, 5: // fixed64, fixed32
			size := 8
			if wire == 5 {
				size = 4
			}
			if len(b) < size {
				return 0, "", fmt.Errorf("%w: status: short field %d", ErrCorruptAnswer, field)
			}
			b = b[size:]
		default:
			return 0, "", fmt.Errorf("%w: status: wire type %d in field %d", ErrCorruptAnswer, wire, field)
		}
	}
	return code, msg, nil
}
