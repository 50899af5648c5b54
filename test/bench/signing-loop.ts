// The baseline of the dispatcher benchmark: what a minimal client does — sign (HMAC-SHA256 over
// "ts.body") and POST each body over undici, N at a time — in its own process, as the dispatcher
// runs in its own: both pay the same cross-process hand-offs to the receiver, so the ratio
// measures the dispatcher's own work. Reads its job from the JSON file named by SIGNING_LOOP_JOB;
// exits 0 once every body was answered with 2xx.
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Pool } from 'undici';

export interface SigningLoopJob {
  origin: string;
  caPath: string;
  secret: string;
  concurrency: number;
  bodies: { id: string; body: string }[];
}

async function signAndPost(job: SigningLoopJob): Promise<void> {
  const pool = new Pool(job.origin, { connections: job.concurrency, connect: { ca: readFileSync(job.caPath) } });
  let next = 0;
  const worker = async () => {
    while (next < job.bodies.length) {
      const { id, body } = job.bodies[next++];
      const ts = String(Math.floor(Date.now() / 1000));
      const signature = createHmac('sha256', job.secret).update(`${ts}.${body}`).digest('hex');
      const res = await pool.request({
        method: 'POST',
        path: '/baseline',
        headers: { 'content-type': 'application/json', 'x-service-event-id': id, 'x-service-timestamp': ts, 'x-service-signature': `sha256=${signature}` },
        body,
      });
      await res.body.dump();
      if (res.statusCode >= 300) throw new Error(`baseline post: ${res.statusCode}`);
    }
  };
  try {
    await Promise.all(Array.from({ length: job.concurrency }, worker));
  } finally {
    await pool.close();
  }
}

await signAndPost(JSON.parse(readFileSync(process.env.SIGNING_LOOP_JOB!, 'utf8')) as SigningLoopJob);
