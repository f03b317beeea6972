package framework

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestQuantilesOf(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		in   []time.Duration
		want Quantiles
	}{
		{name: "none", want: Quantiles{}},
		{name: "one", in: []time.Duration{7 * ms}, want: Quantiles{MedianMs: 7, P95Ms: 7, MaxMs: 7, AllMs: []float64{7}}},
		{name: "even count takes the lower middle", in: []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms},
			want: Quantiles{MedianMs: 2, P95Ms: 4, MaxMs: 4, AllMs: []float64{1, 2, 3, 4}}},
		{name: "p95 of 20 is the 19th", in: func() []time.Duration {
			var ds []time.Duration
			for i := 20; i >= 1; i-- {
				ds = append(ds, time.Duration(i)*ms)
			}
			return ds
		}(), want: Quantiles{MedianMs: 10, P95Ms: 19, MaxMs: 20, AllMs: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}}},
		{name: "sub-millisecond", in: []time.Duration{1500 * time.Microsecond}, want: Quantiles{MedianMs: 1.5, P95Ms: 1.5, MaxMs: 1.5, AllMs: []float64{1.5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(QuantilesOf(tt.in)).To(Equal(tt.want))
		})
	}
}
