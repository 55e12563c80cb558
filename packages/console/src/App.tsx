import type { ReactNode } from 'react';
import { Layout, type NavItem } from './Layout';
import { AcceptInvitation } from './pages/AcceptInvitation';
import { AgentDetail } from './pages/AgentDetail';
import { AgentSession } from './pages/AgentSession';
import { Agents } from './pages/Agents';
import { ApiKeys } from './pages/ApiKeys';
import { AppDetail, Apps } from './pages/Apps';
import { Documents } from './pages/Documents';
import { Images } from './pages/Images';
import { Insights } from './pages/Insights';
import { Members } from './pages/Members';
import { Overview } from './pages/Overview';
import { Playground } from './pages/Playground';
import { SignIn } from './pages/SignIn';
import { SignInProblem } from './pages/SignInProblem';
import { Storage } from './pages/Storage';
import { usePath } from './router';
import { useSession } from './session';
import { Page } from './ui';

const NAV: NavItem[] = [
  { href: '/', label: 'Overview' },
  { href: '/playground', label: 'Playground' },
  { href: '/images', label: 'Images' },
  { href: '/agents', label: 'Agents' },
  { href: '/apps', label: 'Apps' },
  { href: '/storage', label: 'Storage' },
  { href: '/documents', label: 'Documents' },
  { href: '/insights', label: 'Insights' },
  { href: '/api-keys', label: 'API keys' },
  { href: '/members', label: 'Members' },
];

function route(path: string): ReactNode {
  const session = /^\/agents\/([^/]+)\/sessions\/([^/]+)$/.exec(path);
  if (session?.[1] && session[2]) return <AgentSession agentId={session[1]} sessionId={session[2]} />;
  const app = /^\/apps\/([^/]+)$/.exec(path);
  if (app?.[1]) return <AppDetail key={app[1]} appId={app[1]} />;
  const agent = /^\/agents\/([^/]+)$/.exec(path);
  if (agent?.[1]) return <AgentDetail key={agent[1]} agentId={agent[1]} />;
  switch (path) {
    case '/agents':
      return <Agents />;
    case '/apps':
      return <Apps />;
    case '/storage':
      return <Storage />;
    case '/documents':
      return <Documents />;
    case '/images':
      return <Images />;
    case '/insights':
      return <Insights />;
    case '/members':
      return <Members />;
    case '/':
      return <Overview />;
    case '/playground':
      return <Playground />;
    case '/api-keys':
      return <ApiKeys />;
    default:
      return (
        <Page title="Page not found">
          <p>There is no console page at {path}.</p>
        </Page>
      );
  }
}

export function App() {
  const { session } = useSession();
  const path = usePath();
  if (session === undefined) {
    return (
      <p className="muted boot" role="status">
        Loading…
      </p>
    );
  }
  if (path === '/invitations/accept') return <AcceptInvitation />;
  if (path === '/sign-in/problem') return <SignInProblem />;
  if (session === null) return <SignIn />;
  return <Layout nav={NAV}>{route(path)}</Layout>;
}
