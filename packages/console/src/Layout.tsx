import { type ReactNode, useEffect, useState } from 'react';
import { client, errorMessage } from './api';
import { Link, navigate, usePath } from './router';
import { isManager, useRole, useSession } from './session';

export interface NavItem {
  href: string;
  label: string;
  managersOnly?: boolean;
}

export function Layout({ nav, children }: { nav: NavItem[]; children: ReactNode }) {
  const { session, refresh, signedOut } = useSession();
  const role = useRole();
  const path = usePath();
  // On a phone the sections fold into a menu (the button shows below 720 px wide, styles.css).
  const [menuOpen, setMenuOpen] = useState(false);
  // biome-ignore lint/correctness/useExhaustiveDependencies: a new page closes the menu
  useEffect(() => setMenuOpen(false), [path]);
  if (!session) return null;
  const switchTo = async (workspaceId: string) => {
    try {
      await client.auth.switchWorkspace(workspaceId);
      await refresh();
      navigate('/', { replace: true });
    } catch (err) {
      window.alert(errorMessage(err));
    }
  };
  const signOut = async () => {
    try {
      await client.auth.signOut();
    } finally {
      signedOut();
      navigate('/', { replace: true });
    }
  };
  return (
    <div className="shell">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <button
          type="button"
          className="secondary menu-toggle"
          aria-expanded={menuOpen}
          aria-controls="console-nav"
          onClick={() => setMenuOpen((o) => !o)}
        >
          Menu
        </button>
        <span className="brand">AI Suite</span>
        <div className="topbar-right">
          <select
            className="ws-switch"
            aria-label="Workspace"
            value={session.workspace?.id ?? ''}
            onChange={(e) => void switchTo(e.target.value)}
          >
            {session.workspace ? null : <option value="">Choose a workspace</option>}
            {session.workspaces.map((w) => (
              <option key={w.id} value={w.id}>
                {w.name} ({w.role})
              </option>
            ))}
          </select>
          <span className="who" title={session.user.email}>
            {session.user.email}
          </span>
          <button type="button" className="secondary" onClick={() => void signOut()}>
            Sign out
          </button>
        </div>
      </header>
      <nav id="console-nav" className={menuOpen ? 'sidenav open' : 'sidenav'} aria-label="Console">
        <ul>
          {nav
            .filter((n) => !n.managersOnly || isManager(role))
            .map((n) => {
              const current =
                n.href === '/' ? path === '/' : path === n.href || path.startsWith(`${n.href}/`);
              return (
                <li key={n.href}>
                  <Link href={n.href} aria-current={current ? 'page' : undefined}>
                    {n.label}
                  </Link>
                </li>
              );
            })}
        </ul>
      </nav>
      <main id="main" className="content">
        {session.workspace ? children : <p>Choose a workspace above to start.</p>}
      </main>
    </div>
  );
}
