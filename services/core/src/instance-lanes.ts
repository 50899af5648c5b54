// Runs the run-state operations of one instance (start, stop, reset, remove, and in the process
// that hosts the session, sandbox operations; in the gateway, the Instance resource's update with
// the operation it announces) one after another, each with its database write, while other
// instances' operations go on. Interleaved, a disconnect could stop the session that a
// later connect had found running, leaving the instance `stopped` with `paused` false and no
// session.
export class InstanceLanes {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(instanceId: string, op: () => Promise<T>): Promise<T> {
    const result = (this.tails.get(instanceId) ?? Promise.resolve()).then(op);
    const tail = result.catch(() => undefined); // a failed operation does not stop the next
    this.tails.set(instanceId, tail);
    void tail.then(() => this.tails.get(instanceId) === tail && this.tails.delete(instanceId));
    return result;
  }

  /** Resolves once the operations queued so far for the instance have finished (a call to its
   *  session waits for them, so it sees the outcome of a delete or stop already under way). */
  idle(instanceId: string): Promise<void> {
    return (this.tails.get(instanceId) ?? Promise.resolve()).then(() => undefined);
  }

  /** Resolves once every instance's queued operations have finished. */
  async idleAll(): Promise<void> {
    await Promise.all(this.tails.values());
  }
}
