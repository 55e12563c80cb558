import nodemailer from 'nodemailer';
import type { IdentitySettings } from './settings.js';

export interface Mail {
  to: string;
  subject: string;
  text: string;
}

/** `smtp://user:pass@host:port` (STARTTLS when offered) or `smtps://…` (TLS from the start). */
function smtpOptions(url: string) {
  const u = new URL(url);
  const secure = u.protocol === 'smtps:';
  return {
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: u.port ? Number(u.port) : secure ? 465 : 587,
    secure,
    auth: u.username
      ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) }
      : undefined,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 20_000,
  };
}

/**
 * Sends mail through the configured SMTP server (nodemailer: the SMTP dialogue, STARTTLS,
 * authentication and MIME encoding are a solved problem). Without `SMTP_URL` nothing is sent
 * and callers hand the link to the operator instead.
 */
export class Mailer {
  private readonly transport: ReturnType<typeof nodemailer.createTransport> | undefined;

  constructor(private readonly settings: IdentitySettings['mail']) {
    this.transport = settings ? nodemailer.createTransport(smtpOptions(settings.smtpUrl)) : undefined;
  }

  get enabled(): boolean {
    return this.transport !== undefined;
  }

  /** Sends one message; false when mail is not configured. Throws when the server refuses it. */
  async send(mail: Mail): Promise<boolean> {
    if (!this.transport || !this.settings) return false;
    await this.transport.sendMail({ from: this.settings.from, ...mail });
    return true;
  }

  close(): void {
    this.transport?.close();
  }
}
