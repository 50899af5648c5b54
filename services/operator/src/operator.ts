// One operator replica: it campaigns for the Lease and runs the controller only while it leads.
// Losing the lease (it could not renew in time) stops the controller and reports it, so the
// process can exit and a fresh one campaigns again: a stale leader never keeps reconciling. A
// clean stop (SIGTERM) is not a loss: it releases the lease so a standby takes over at once.
import { CoordinationV1Api } from '@kubernetes/client-node';
import { Controller, type ControllerOptions } from './controller.ts';
import { LeaderElector, type LeaderElectionOptions } from './leader-election.ts';

export interface OperatorOptions extends ControllerOptions {
  leaseName: string;
  identity: string;
  /** Lease timings (defaults: 15 s lease, renewed every 2 s). */
  election?: Pick<LeaderElectionOptions, 'leaseDurationMs' | 'renewDeadlineMs' | 'renewIntervalMs' | 'retryIntervalMs' | 'now'>;
  /** Called when leadership is lost while running (not on stop()). */
  onLostLeadership: () => void;
}

export class Operator {
  readonly controller: Controller;
  private readonly elector: LeaderElector;
  private stopping = false;

  constructor(o: OperatorOptions) {
    const { logger } = o;
    this.controller = new Controller(o);
    this.elector = new LeaderElector({
      ...o.election,
      api: o.kubeConfig.makeApiClient(CoordinationV1Api),
      namespace: o.namespace,
      leaseName: o.leaseName,
      identity: o.identity,
      onStartedLeading: async () => {
        logger.info({ identity: o.identity }, 'became leader; starting the controller');
        await this.controller.start();
      },
      onStoppedLeading: async () => {
        await this.controller.stop();
        if (this.stopping) return;
        logger.warn({ identity: o.identity }, 'lost leadership');
        o.onLostLeadership();
      },
      onError: (err) => logger.warn({ err: String(err) }, 'leader election round failed'),
    });
  }

  get isLeader(): boolean {
    return this.elector.isLeader;
  }

  start(): void {
    this.elector.start();
  }

  /** Stops the controller and releases the lease if held. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.elector.stop();
    await this.controller.stop();
  }
}
