package gateway

// tapSet is the taps the hub's index files under one value (a tenant, an
// aggregate type): most values have one tap (one endpoint per tenant), so
// one is held as a pointer and only more get a map. An index of 100,000
// tenants then holds a pointer per tenant, not a map of one.
type tapSet struct {
	one  *Tap              // the only tap, while there is one
	many map[*Tap]struct{} // every tap, once there are more
}

func (s *tapSet) add(t *Tap) {
	switch {
	case s.many != nil:
		s.many[t] = struct{}{}
	case s.one == nil || s.one == t:
		s.one = t
	default:
		s.many = map[*Tap]struct{}{s.one: {}, t: {}}
		s.one = nil
	}
}

func (s *tapSet) remove(t *Tap) {
	if s.many == nil {
		if s.one == t {
			s.one = nil
		}
		return
	}
	delete(s.many, t)
	if len(s.many) == 1 {
		for o := range s.many {
			s.one = o
		}
		s.many = nil
	}
}

func (s tapSet) empty() bool { return s.one == nil && len(s.many) == 0 }

// each calls f with every tap of s.
func (s tapSet) each(f func(*Tap)) {
	if s.one != nil {
		f(s.one)
	}
	for t := range s.many {
		f(t)
	}
}
