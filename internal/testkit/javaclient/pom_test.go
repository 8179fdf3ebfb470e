package javaclient

import (
	"strings"
	"testing"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// Guards against the Java client drifting from the broker version the tier
// pins: the pom's kafka-clients version is realkafka.Kafka4.
func TestPomPinsKafka4(t *testing.T) {
	pom, err := project.ReadFile("pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	if want := "<kafka.version>" + realkafka.Kafka4 + "</kafka.version>"; !strings.Contains(string(pom), want) {
		t.Fatalf("pom.xml lacks %s", want)
	}
	key, err := sourceHash()
	if err != nil || !strings.HasPrefix(key, "kafka-clients-"+realkafka.Kafka4+"-") {
		t.Fatalf("cache key %q, %v", key, err)
	}
}
