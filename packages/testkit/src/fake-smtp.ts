import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  from: string | undefined;
  to: string[];
  /** The raw message (headers and body) as the client sent it. */
  raw: string;
  /** The authenticated user, when the client logged in. */
  user: string | undefined;
}

export interface FakeSmtp {
  /** `smtp://user:pass@127.0.0.1:port` for SMTP_URL. */
  url: string;
  received: ReceivedMail[];
  /** Refuse every message (550) from now on, or accept again. */
  refuse(on: boolean): void;
  close(): Promise<void>;
}

/**
 * A real SMTP server on loopback (the `smtp-server` package): plain SMTP with AUTH PLAIN/LOGIN
 * accepted without TLS, every message kept in `received`. Speaks the protocol the mailer's
 * nodemailer client uses, so mail sending is tested end to end.
 */
export async function startFakeSmtp(opts: { user?: string; pass?: string } = {}): Promise<FakeSmtp> {
  const user = opts.user ?? 'mailer';
  const pass = opts.pass ?? 'secret';
  const received: ReceivedMail[] = [];
  let refusing = false;
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authOptional: true,
    logger: false,
    onAuth(auth, _session, cb) {
      if (auth.username === user && auth.password === pass) cb(null, { user });
      else cb(new Error('Invalid username or password'));
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (refusing) {
          const err = new Error('Mailbox unavailable') as Error & { responseCode: number };
          err.responseCode = 550;
          cb(err);
          return;
        }
        received.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : undefined,
          to: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
          user: typeof session.user === 'string' ? session.user : undefined,
        });
        cb();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.server.address() as AddressInfo;
  return {
    url: `smtp://${encodeURIComponent(user)}:${encodeURIComponent(pass)}@127.0.0.1:${port}`,
    received,
    refuse(on) {
      refusing = on;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
