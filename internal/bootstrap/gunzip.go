package bootstrap

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// maxDecompressedBytes bounds what the gzip content of one bootstrap data decompresses to, all
// its files together. The data is one Secret, which the API server keeps within 1 MiB, and real
// node files (configuration, scripts, certificates, a small binary) compress at most about 10:1:
// no real data decompresses past about 10 MiB. Deflate reaches about 1000:1, so without a bound
// a 1 MiB Secret decompresses to 1 GiB at every parse, and a parse runs at every pool reconcile.
// A bound per file alone would not do: many small files add up to the same.
const maxDecompressedBytes = 16 << 20

// gunzipBudget is what is left of maxDecompressedBytes for the files of one parse.
type gunzipBudget struct {
	remaining int64
}

func newGunzipBudget() *gunzipBudget {
	return &gunzipBudget{remaining: maxDecompressedBytes}
}

// gunzip decompresses content within what is left of the budget and takes it from the budget.
func (b *gunzipBudget) gunzip(content []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(content))
	if err != nil {
		return nil, fmt.Errorf("content is not valid gzip: %w", err)
	}
	// One byte more than what is left tells content past the limit from content that fills it.
	out, err := io.ReadAll(io.LimitReader(r, b.remaining+1))
	if err != nil {
		return nil, fmt.Errorf("content is not valid gzip: %w", err)
	}
	if int64(len(out)) > b.remaining {
		return nil, fmt.Errorf("gzip content decompresses past %d MiB, the limit for all the files of bootstrap data together", maxDecompressedBytes>>20)
	}
	b.remaining -= int64(len(out))
	return out, nil
}
