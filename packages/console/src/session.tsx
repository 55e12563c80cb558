import type { AuthSession } from '@ai-suite/sdk';
import { createContext, type ReactNode, useCallback, useContext, useEffect, useState } from 'react';
import { client } from './api';

type Role = 'owner' | 'admin' | 'member';

interface SessionState {
  /** undefined while loading, null when signed out. */
  session: AuthSession | null | undefined;
  refresh(): Promise<void>;
  signedOut(): void;
}

const Ctx = createContext<SessionState>({ session: undefined, refresh: async () => {}, signedOut: () => {} });

export function SessionProvider({ children }: { children: ReactNode }) {
  const [session, setSession] = useState<AuthSession | null | undefined>(undefined);
  const refresh = useCallback(async () => {
    try {
      setSession(await client.auth.session());
    } catch {
      setSession(null);
    }
  }, []);
  useEffect(() => {
    void refresh();
  }, [refresh]);
  return (
    <Ctx.Provider value={{ session, refresh, signedOut: () => setSession(null) }}>{children}</Ctx.Provider>
  );
}

export function useSession() {
  return useContext(Ctx);
}

/** The signed-in person's role in the workspace the session acts in. */
export function useRole(): Role | undefined {
  return useSession().session?.workspace?.role as Role | undefined;
}

export function isManager(role: Role | undefined): boolean {
  return role === 'owner' || role === 'admin';
}
