// A latency histogram in the spirit of HdrHistogram: values (microseconds) fall into log-linear
// buckets — 64 linear sub-buckets per power of two — so percentiles keep about 1.6 % precision
// from 1 µs to hours in a few KB, and recording is O(1) without keeping every sample.
const SUB_BUCKET_BITS = 6;
const SUB_BUCKETS = 1 << SUB_BUCKET_BITS;
const MAX_EXPONENT = 42; // 2^42 µs ≈ 51 days: anything larger is clamped

export class LatencyHistogram {
  private readonly counts = new Float64Array((MAX_EXPONENT + 1) * SUB_BUCKETS);
  private total = 0;
  private sum = 0;
  private maxValue = 0;

  /** Records one latency in microseconds. */
  record(micros: number): void {
    const v = Math.max(0, Math.round(micros));
    this.counts[bucketOf(v)]++;
    this.total++;
    this.sum += v;
    if (v > this.maxValue) this.maxValue = v;
  }

  recordMs(ms: number): void {
    this.record(ms * 1000);
  }

  get count(): number {
    return this.total;
  }

  meanMs(): number {
    return this.total ? this.sum / this.total / 1000 : 0;
  }

  maxMs(): number {
    return this.maxValue / 1000;
  }

  /** The value at or below which `p` % of the recorded values lie, in milliseconds. */
  percentileMs(p: number): number {
    if (!this.total) return 0;
    const rank = Math.ceil((p / 100) * this.total);
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i];
      if (seen >= rank) return Math.min(upperBoundOf(i), this.maxValue) / 1000;
    }
    return this.maxValue / 1000;
  }

  merge(other: LatencyHistogram): void {
    for (let i = 0; i < this.counts.length; i++) this.counts[i] += other.counts[i];
    this.total += other.total;
    this.sum += other.sum;
    this.maxValue = Math.max(this.maxValue, other.maxValue);
  }
}

/** Values below SUB_BUCKETS map 1:1; above, the top SUB_BUCKET_BITS bits after the leading one pick the sub-bucket. */
export function bucketOf(v: number): number {
  if (v < SUB_BUCKETS) return v;
  const exponent = Math.min(Math.floor(Math.log2(v)), MAX_EXPONENT);
  const shift = exponent - SUB_BUCKET_BITS;
  const sub = Math.min(Math.floor(v / 2 ** shift) - SUB_BUCKETS, SUB_BUCKETS - 1);
  return (exponent - SUB_BUCKET_BITS + 1) * SUB_BUCKETS + sub;
}

/** The largest value that falls into bucket `i`. */
export function upperBoundOf(i: number): number {
  if (i < SUB_BUCKETS) return i;
  const exponent = Math.floor(i / SUB_BUCKETS) + SUB_BUCKET_BITS - 1;
  const sub = i % SUB_BUCKETS;
  const shift = exponent - SUB_BUCKET_BITS;
  return (SUB_BUCKETS + sub + 1) * 2 ** shift - 1;
}
