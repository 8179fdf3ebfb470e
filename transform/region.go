package transform

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// ParseClusterID decodes a Kafka cluster ID into its 16 UUID bytes. It
// accepts the form Kafka uses (22 characters of unpadded base64url) and the
// canonical 8-4-4-4-12 hexadecimal form. ok is false for anything else.
func ParseClusterID(id string) (uuid [16]byte, ok bool) {
	switch len(id) {
	case 22:
		n, err := base64.RawURLEncoding.Decode(uuid[:], []byte(id))
		// RawURLEncoding is strict about the unused low bits of the
		// last character only when Strict is set; a 22-character
		// string always carries 132 bits, of which the last 4 must be
		// zero for a canonical encoding. Kafka's Uuid.fromString uses
		// Java's decoder, which ignores them too, so we accept both.
		return uuid, err == nil && n == 16
	case 36:
		if id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
			return uuid, false
		}
		h := strings.ReplaceAll(id, "-", "")
		if len(h) != 32 {
			return uuid, false
		}
		_, err := hex.Decode(uuid[:], []byte(h))
		return uuid, err == nil
	}
	return uuid, false
}

// Region is the 32-bit region selector of a source cluster.
type Region uint32

// RegionOf folds a cluster ID to its region: the low 32 bits of the UUID's
// most significant 64-bit half XOR its least significant half, both read
// big-endian (spec 000, DESIGN §3).
//
// A cluster ID that is not a UUID (old ZooKeeper clusters may carry anything,
// and kfake defaults to "kfake") is hashed instead: the first 16 bytes of its
// SHA-256 are folded the same way, and hashed is true so that the caller can
// warn the operator and suggest pinning cluster_id in the config.
func RegionOf(clusterID string) (r Region, hashed bool) {
	uuid, ok := ParseClusterID(clusterID)
	if !ok {
		sum := sha256.Sum256([]byte(clusterID))
		copy(uuid[:], sum[:16])
		hashed = true
	}
	return foldUUID(uuid), hashed
}

func foldUUID(u [16]byte) Region {
	msb := binary.BigEndian.Uint64(u[:8])
	lsb := binary.BigEndian.Uint64(u[8:])
	return Region(uint32(msb ^ lsb))
}
