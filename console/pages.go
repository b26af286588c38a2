package console

func (s *Server) pages() {}
