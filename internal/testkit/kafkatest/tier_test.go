package kafkatest

import "testing"

// The real tier skips kfake tests by their names: only a cluster started
// under a real-Kafka subtest is kept.
func TestUnderRealKafka(t *testing.T) {
	for name, want := range map[string]bool{
		"TestScenario/kafka-4.4.0":                 true,
		"TestScenario/kafka-3.9.2/sub":             true,
		"TestScenario/kfake":                       false,
		"TestKfakeOnly":                            false,
		"TestKfakeOnly/case-kafka":                 false,
		"TestJavaClientsThroughMirror/kafka-4.4.0": true,
	} {
		if got := underRealKafka(name); got != want {
			t.Errorf("underRealKafka(%q) = %v, want %v", name, got, want)
		}
	}
}
